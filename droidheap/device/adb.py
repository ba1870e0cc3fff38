"""A phone (or any Android device) over adb: the Device interface through the adb server, with
adbutils for the server protocol and shell v2 (exit codes), and our own sync client.

What a session needs to know about the device is read once, when it is opened (DeviceFacts).
Profiling over adb (pushing the daemon, the root / preload / platform routes of issue 7) is not
done yet: the methods only a session uses say so in one line instead of pretending.

An AdbDevice is created by the CLI command that uses it and used from that thread only.
"""
import dataclasses
import pathlib
import re
import shlex
import subprocess
from typing import Dict, List, Optional, Sequence

from droidheap.device.adb_connection import adb_errors, adb_executable, ensure_server, select_serial
from droidheap.device.adb_sync import SyncClient
from droidheap.device.base import DaemonProcess, Device, DeviceLayout
from droidheap.errors import DroidheapError

_SHELL_TIMEOUT_S = 30.0
_SU_TIMEOUT_S = 10.0
_PROPERTY_LINE = re.compile(r"^\[(.*?)\]: \[(.*)\]$")
_NOT_DONE = ("profiling over adb is not done yet (issue 7: device selection, files and shell "
             "work; sessions do not): use --local for the emulator device")


@dataclasses.dataclass
class ShellResult:
    exit_code: int
    stdout: str
    stderr: str


@dataclasses.dataclass
class DeviceFacts:
    serial: str
    model: str
    abi: str
    abilist: List[str]      # every ABI it runs, 32-bit ones included (app processes may be)
    sdk: int
    build_type: str         # user, userdebug, eng
    root: Optional[str]     # "adbd" (adb root), "su", or None
    selinux: str            # Enforcing, Permissive, Disabled (or "unknown")


class AdbDevice(Device):
    def __init__(self, serial: Optional[str] = None):
        client = ensure_server()
        self.serial = select_serial(client, serial)
        self._adb = client.device(serial=self.serial)
        with adb_errors(f"cannot talk to adb device {self.serial}"):
            features = set(self._adb.get_features().split(","))
        if "shell_v2" not in features:
            raise DroidheapError(f"adb device {self.serial} has no shell v2 protocol (Android 7 "
                                 f"or later is needed)")
        self._sync = SyncClient(self._adb)
        self.facts = self._read_facts()
        self.abi = self.facts.abi
        # Where a non-rooted session will keep its files (the shell user may write only here).
        base = "/data/local/tmp/droidheap"
        self.layout = DeviceLayout(bin_dir=base, lib_dir=base,
                                   socket_path=f"{base}/droidheapd.socket",
                                   trace_dir=f"{base}/traces", tmp_dir="/data/local/tmp")

    # Shell ------------------------------------------------------------------------------------
    def run(self, argv: Sequence[str], timeout_s: float = _SHELL_TIMEOUT_S) -> ShellResult:
        """Runs argv (each word quoted for the device's sh) and returns its exit code and output."""
        return self.run_script(shlex.join(argv), timeout_s)

    def run_script(self, script: str, timeout_s: float = _SHELL_TIMEOUT_S) -> ShellResult:
        """Runs a command line in the device's sh."""
        with adb_errors(f"adb shell on {self.serial} failed ({script[:60]})"):
            result = self._adb.shell2(script, timeout=timeout_s, v2=True)
        return ShellResult(result.returncode, result.stdout, result.stderr)

    def _adb_command(self, argv: Sequence[str]) -> List[str]:
        return [adb_executable(), "-s", self.serial, "shell", shlex.join(argv)]

    def spawn(self, argv: Sequence[str]) -> subprocess.Popen:
        try:
            return subprocess.Popen(self._adb_command(argv))
        except OSError as e:
            raise DroidheapError(f"cannot run adb: {e.strerror}") from None

    def shell(self, argv: Sequence[str]) -> int:
        # `adb shell` itself, so the terminal, Ctrl-C and the exit code behave as users know.
        process = self.spawn(argv)
        while True:
            try:
                return process.wait()
            except KeyboardInterrupt:
                continue  # adb passes the Ctrl-C on; its exit code tells what the program did

    # Facts ------------------------------------------------------------------------------------
    def properties(self) -> Dict[str, str]:
        result = self.run(["getprop"])
        if result.exit_code != 0:
            raise DroidheapError(f"getprop failed on {self.serial}: {result.stderr.strip()}")
        props = {}
        for line in result.stdout.splitlines():
            match = _PROPERTY_LINE.match(line)
            if match:
                props[match.group(1)] = match.group(2)
        return props

    def getprop(self, key: str) -> str:
        return self.run(["getprop", key]).stdout.strip()

    def _root_route(self) -> Optional[str]:
        if self.run(["id", "-u"]).stdout.strip() == "0":
            return "adbd"
        # AOSP's su (userdebug) takes a uid, Magisk's and SuperSU's take -c. A su that waits for
        # a prompt on the phone counts as no su.
        for probe in ("su 0 id -u", "su -c 'id -u'"):
            try:
                result = self.run_script(f"{probe} </dev/null", _SU_TIMEOUT_S)
            except DroidheapError:
                continue
            if result.exit_code == 0 and result.stdout.strip() == "0":
                return "su"
        return None

    def _read_facts(self) -> DeviceFacts:
        props = self.properties()
        abi = props.get("ro.product.cpu.abi", "")
        if not abi:
            raise DroidheapError(f"adb device {self.serial} reports no ro.product.cpu.abi")
        abilist = [a for a in props.get("ro.product.cpu.abilist", abi).split(",") if a]
        try:
            sdk = int(props.get("ro.build.version.sdk", ""))
        except ValueError:
            raise DroidheapError(f"adb device {self.serial} reports no SDK level "
                                 f"(ro.build.version.sdk)") from None
        enforce = self.run(["getenforce"])
        selinux = enforce.stdout.strip() if enforce.exit_code == 0 else "unknown"
        return DeviceFacts(serial=self.serial, model=props.get("ro.product.model", "?"), abi=abi,
                           abilist=abilist, sdk=sdk, build_type=props.get("ro.build.type", "?"),
                           root=self._root_route(), selinux=selinux or "unknown")

    def describe(self) -> str:
        f = self.facts
        return f"adb device {f.serial} ({f.model}, {f.abi}, SDK {f.sdk}, {f.build_type})"

    # Properties and processes -----------------------------------------------------------------
    def set_properties(self, properties: Dict[str, str]) -> None:
        for key, value in properties.items():
            result = self.run(["setprop", key, value])
            if result.exit_code != 0:
                reason = (result.stderr.strip().splitlines() or ["setprop failed"])[0]
                raise DroidheapError(f"cannot set {key} on {self.serial}: {reason}")

    def pidof(self, name: str) -> List[int]:
        """Pids of processes named `name`: an app's main process is its package name, its other
        processes `package:suffix`."""
        result = self.run(["pidof", name])
        if result.exit_code != 0:
            return []
        try:
            return sorted(int(pid) for pid in result.stdout.split())
        except ValueError:
            raise DroidheapError(f"pidof on {self.serial} answered {result.stdout.strip()!r}") \
                from None

    def process_exists(self, pid: int) -> bool:
        return self.run(["test", "-d", f"/proc/{int(pid)}"]).exit_code == 0

    def check_program(self, argv: Sequence[str]) -> None:
        program = argv[0]
        if "/" not in program:
            if self.run(["sh", "-c", 'command -v "$1"', "sh", program]).exit_code != 0:
                raise DroidheapError(f"cannot start {program}: no such program on {self.serial}")
            return
        if self.run(["test", "-f", program]).exit_code != 0:
            raise DroidheapError(f"cannot start {program}: no such file on {self.serial}")
        if self.run(["test", "-x", program]).exit_code != 0:
            raise DroidheapError(f"cannot start {program}: permission denied")

    # Files ------------------------------------------------------------------------------------
    def push(self, local: pathlib.Path, remote: str, mode: int = 0o755) -> None:
        self._sync.push(local, remote, mode)

    def pull(self, remote: str, local: pathlib.Path) -> None:
        self._sync.pull(remote, local)

    def remove(self, remote: str) -> None:
        result = self.run(["rm", "-f", remote])
        if result.exit_code != 0:
            raise DroidheapError(f"cannot remove {remote} on {self.serial}: "
                                 f"{result.stderr.strip()}")

    # What only a profiling session needs: not done over adb yet --------------------------------
    def lock(self) -> None:
        raise DroidheapError(_NOT_DONE)

    def unlock(self) -> None:
        pass  # never locked: lock() refuses

    def install_profiler(self, binaries: pathlib.Path) -> None:
        raise DroidheapError(_NOT_DONE)

    def check_attachable(self, pid: int) -> None:
        raise DroidheapError(_NOT_DONE)

    def start_daemon(self, args: Sequence[str]) -> DaemonProcess:
        raise DroidheapError(_NOT_DONE)
