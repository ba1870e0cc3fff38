"""A phone (or any Android device) over adb: the Device interface through the adb server, with
adbutils for the server protocol, and our own shell v2 reader (exit codes; bounded: adb_shell.py)
and sync client.

What a session needs to know about the device is read once, when it is opened (DeviceFacts). How
our client gets into processes there -- as root through bionic's own routes, or through
LD_PRELOAD without root -- is its Route (adb_routes.py), chosen then; the changes a session makes
are journaled on the device (adb_journal.py), and droidheapd and profiled programs run in streams
this process holds (adb_processes.py).

An AdbDevice is created by the CLI command that uses it and used from that thread only.
"""
import dataclasses
import pathlib
import posixpath
import re
import shlex
import shutil
import stat
import subprocess
from typing import Dict, List, Optional, Sequence

from droidheap import native
from droidheap.device.adb_connection import adb_errors, adb_executable, ensure_server, select_serial
from droidheap.device.adb_journal import (PLATFORM_TRACE_DIR, PLATFORM_TRACES, PROFILER_DIR,
                                          TRACE_DIR, DeviceJournal)
from droidheap.device.adb_processes import AdbDaemon, AdbProgram, exec_script, pid_announcing
from droidheap.device.adb_root_dir import RootDirectory
from droidheap.device.adb_routes import PRELOAD_EVERY_PROGRAM, PreloadRoute, RootRoute
from droidheap.device.adb_shell import ANSWER_MAX_BYTES, LISTING_MAX_BYTES, run_command
from droidheap.device.adb_sync import MIN_PULL_RATE_BYTES_S, SyncClient
from droidheap.device.base import TRACE_GLOB, DaemonProcess, Device, DeviceLayout
from droidheap.device.names import check_property_name, program_name
from droidheap.errors import DroidheapError
from droidheap.output_files import make_private_dirs
from droidheap.progress import progress_bar, watched
from droidheap.safe_paths import mirror_path

_SHELL_TIMEOUT_S = 30.0  # for the whole command, as every deadline here
_SU_TIMEOUT_S = 10.0
# A phone's whole getprop is some tens of KiB (one or two thousand properties).
_PROPERTIES_MAX_BYTES = 4 << 20
# A file smaller than this arrives before a bar would be worth drawing.
_PROGRESS_MIN_BYTES = 1 << 20
_RANGE_BLOCK = 4096
# Beside the blocks dd reads: room for the shell's message when it cannot run dd at all.
_RANGE_MESSAGE_MAX_BYTES = 64 * 1024
# The processes apps are forked from, by argv[0] (zygote's unspecialised app processes, USAPs, are
# its children too).
_ZYGOTES = ("zygote", "zygote64", "webview_zygote")
_PROPERTY_LINE = re.compile(r"^\[(.*?)\]: \[(.*)\]$")
# What follows each command's output in the script that reads a device's facts, with its status.
_FACTS = "droidheap-facts"
MODES = ("auto", "root", "preload", "platform")
_64_BIT_ABIS = ("arm64-v8a", "x86_64")


@dataclasses.dataclass
class ShellResult:
    exit_code: int
    stdout: str
    stderr: str


# What one pull may take: far more than any trace or library of a session, and never the room
# this machine needs to go on.
PULL_MAX_BYTES = 16 << 30
PULL_DISK_RESERVE_BYTES = 256 << 20


@dataclasses.dataclass
class DeviceFacts:
    serial: str
    model: str
    abi: str
    abilist: List[str]      # every ABI it runs, 32-bit ones included (app processes may be)
    sdk: int
    build_type: str         # user, userdebug, eng
    root: Optional[str]     # "adbd" (adb root), "su", or None
    su_command: str         # what runs a command line as root through su ("" without su)
    selinux: str            # Enforcing, Permissive, Disabled (or "unknown")


# Shells and the wrappers that exec a command: what they run is the point of running them.
_RUNS_OTHER_PROGRAMS = frozenset({"sh", "mksh", "bash", "dash", "env", "taskset", "nice", "nohup",
                                  "timeout", "time", "xargs", "chrt", "ionice", "su", "run-as",
                                  "toybox", "busybox"})


class AdbDevice(Device):
    def __init__(self, serial: Optional[str] = None, mode: str = "auto",
                 disable_selinux: bool = False):
        client = ensure_server()
        self.serial = select_serial(client, serial)
        self.adb = client.device(serial=self.serial)
        with adb_errors(f"cannot talk to adb device {self.serial}"):
            features = set(self.adb.get_features().split(","))
        if "shell_v2" not in features:
            raise DroidheapError(f"adb device {self.serial} has no shell v2 protocol (Android 7 "
                                 f"or later is needed)")
        self._sync = SyncClient(self.adb)
        self.facts = self._read_facts()
        self.abi = self.facts.abi
        self.is_64_bit = self.abi in _64_BIT_ABIS
        self.root_dir = RootDirectory(self)  # used where the device has root
        self.journal = DeviceJournal(self)
        # The platform's own heapprofd, driven by the profile command (platform_heapprofd.py):
        # no client, daemon or route of ours. Only files and the shell are used then.
        self.platform_profiler = mode == "platform"
        self._auto = mode == "auto"
        self.route = self._choose_route("preload" if self.platform_profiler else mode,
                                        disable_selinux)
        self.mode = "platform" if self.platform_profiler else self.route.name
        self.layout = DeviceLayout(bin_dir=self.route.daemon_dir, lib_dir=PROFILER_DIR,
                                   socket_path=self.route.socket_path, trace_dir=TRACE_DIR,
                                   tmp_dir="/data/local/tmp")

    def _choose_route(self, mode: str, disable_selinux: bool):
        if mode not in MODES:
            raise DroidheapError(f"unknown mode {mode}: use one of {', '.join(MODES)}")
        if mode == "root" and self.facts.root is None:
            raise DroidheapError(f"--mode root needs root on {self.serial}: `adb root` (userdebug "
                                 f"builds) or su; without root use --mode preload")
        if disable_selinux and (mode == "preload" or self.facts.root is None):
            raise DroidheapError("--disable-selinux needs root (and the root mode)")
        if mode == "root" or (mode == "auto" and self.facts.root is not None):
            return RootRoute(self, disable_selinux)
        return PreloadRoute(self)

    # Shell ------------------------------------------------------------------------------------
    def run(self, argv: Sequence[str], timeout_s: float = _SHELL_TIMEOUT_S,
            max_output: int = ANSWER_MAX_BYTES) -> ShellResult:
        """Runs argv (each word quoted for the device's sh) and returns its exit code and output."""
        return self.run_script(shlex.join(argv), timeout_s, max_output)

    def run_script(self, script: str, timeout_s: float = _SHELL_TIMEOUT_S,
                   max_output: int = ANSWER_MAX_BYTES) -> ShellResult:
        """Runs a command line in the device's sh: a DroidheapError when it prints more than
        `max_output` bytes (what it can honestly print: adb_shell) or runs past `timeout_s`."""
        output = run_command(self.adb, script, f"adb shell on {self.serial} failed ({script[:60]})",
                             max_output, timeout_s)
        return ShellResult(output.exit_code, output.stdout.decode(errors="replace"),
                           output.stderr.decode(errors="replace"))

    def shell(self, argv: Sequence[str]) -> int:
        """`adb shell` itself, so the terminal, Ctrl-C and the exit code behave as users know;
        without root the program gets the preload library, so that droidheap can attach to it."""
        assignments = self.route.program_assignments()
        if assignments:
            # What the assignments point at (the preload route's files, which change nothing to
            # undo; no session, and so no daemon socket to journal).
            self._install_files()
        try:
            process = subprocess.Popen([adb_executable(), "-s", self.serial, "shell",
                                        exec_script(argv, assignments)])
        except OSError as e:
            raise DroidheapError(f"cannot run adb: {e.strerror}") from None
        while True:
            try:
                return process.wait()
            except KeyboardInterrupt:
                continue  # adb passes the Ctrl-C on; its exit code tells what the program did

    # Facts ------------------------------------------------------------------------------------
    def getprop(self, key: str) -> str:
        return self.run(["getprop", key]).stdout.strip()

    def _root_route(self, uid: str) -> tuple:
        """("adbd" | "su" | None, the su command line prefix), the adb shell's `uid` known."""
        if uid == "0":
            return "adbd", ""
        # AOSP's su (userdebug) takes a uid, Magisk's and SuperSU's take -c. A su that waits for
        # a prompt on the phone counts as no su.
        for prefix in ("su 0 sh -c", "su -c"):
            try:
                result = self.run_script(f"{prefix} 'id -u' </dev/null", _SU_TIMEOUT_S)
            except DroidheapError:
                continue
            if result.exit_code == 0 and result.stdout.strip() == "0":
                return "su", prefix
        return None, ""

    def privileged_script(self, script: str) -> str:
        """`script` as root: as it is under `adb root`, through su otherwise."""
        if self.facts.root == "su":
            return f"{self.facts.su_command} {shlex.quote(script)}"
        return script

    def run_privileged(self, script: str, max_output: int = ANSWER_MAX_BYTES) -> ShellResult:
        return self.run_script(self.privileged_script(script), max_output=max_output)

    def _read_facts(self) -> DeviceFacts:
        # One round trip: getprop, getenforce and the shell's uid, each status after a marker.
        result = self.run_script(f"getprop; echo {_FACTS} $?; getenforce; echo {_FACTS} $?; id -u",
                                 max_output=_PROPERTIES_MAX_BYTES)
        answer = re.fullmatch(rf"(.*)^{_FACTS} (\d+)\n(.*)^{_FACTS} (\d+)\n(.*)", result.stdout,
                              re.MULTILINE | re.DOTALL)
        if answer is None or answer.group(2) != "0":
            reason = (result.stderr.strip().splitlines() or ["no answer"])[0]
            raise DroidheapError(f"getprop failed on {self.serial}: {reason}")
        getprop, _, enforce, enforce_status, uid = answer.groups()
        props = {}
        for line in getprop.splitlines():
            match = _PROPERTY_LINE.match(line)
            if match:
                props[match.group(1)] = match.group(2)
        abi = props.get("ro.product.cpu.abi", "")
        if not abi:
            raise DroidheapError(f"adb device {self.serial} reports no ro.product.cpu.abi")
        abilist = [a for a in props.get("ro.product.cpu.abilist", abi).split(",") if a]
        try:
            sdk = int(props.get("ro.build.version.sdk", ""))
        except ValueError:
            raise DroidheapError(f"adb device {self.serial} reports no SDK level "
                                 f"(ro.build.version.sdk)") from None
        selinux = enforce.strip() if enforce_status == "0" else "unknown"
        root, su_command = self._root_route(uid.strip())
        return DeviceFacts(serial=self.serial, model=props.get("ro.product.model", "?"), abi=abi,
                           abilist=abilist, sdk=sdk, build_type=props.get("ro.build.type", "?"),
                           root=root, su_command=su_command, selinux=selinux or "unknown")

    def describe(self) -> str:
        f = self.facts
        return f"adb device {f.serial} ({f.model}, {f.abi}, SDK {f.sdk}, {f.build_type})"

    # Properties and processes -----------------------------------------------------------------
    def set_properties(self, properties: Dict[str, str]) -> None:
        for key, value in properties.items():
            result = self.run(["setprop", check_property_name(key), value])
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

    def program_names(self) -> Dict[int, str]:
        # Each process's pid and argv[0] (an app's is its process name, as zygote sets it), a line
        # each; kernel threads have none.
        result = self.run_script(
            "for d in /proc/[0-9]*; do a=$(tr '\\0' '\\n' < $d/cmdline 2>/dev/null | head -n 1); "
            '[ -n "$a" ] && echo "${d#/proc/} $a"; done')
        names = {}
        for line in result.stdout.splitlines():
            pid, _, argv0 = line.partition(" ")
            if pid.isdigit() and program_name([argv0]):
                names[int(pid)] = program_name([argv0])
        return names

    def app_name(self, pid: int) -> Optional[str]:
        pid = int(pid)
        result = self.run_script(
            f"ppid=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/{pid}/status) && "
            f"cat /proc/$ppid/cmdline && echo && cat /proc/{pid}/cmdline")
        lines = result.stdout.split("\n", 1)
        if result.exit_code != 0 or len(lines) != 2:
            return None
        parent, own = (line.split("\0", 1)[0] for line in lines)
        if posixpath.basename(parent) not in _ZYGOTES:
            return None
        return own or None

    def process_exists(self, pid: int) -> bool:
        return self.run(["test", "-d", f"/proc/{int(pid)}"]).exit_code == 0

    def cpu_ticks(self, pid: int) -> Optional[int]:
        """utime + stime. None in preload mode too, whose library's hook takes realloc() and
        calloc() as well: there a process that runs connects."""
        if self.mode == "preload":
            return None
        result = self.run(["cat", f"/proc/{int(pid)}/stat"])
        # The fields after the command name, which is in parentheses and may hold anything.
        fields = result.stdout.rpartition(")")[2].split()
        if result.exit_code != 0 or len(fields) < 13:
            return None
        try:
            return int(fields[11]) + int(fields[12])
        except ValueError:
            return None

    def check_program(self, argv: Sequence[str]) -> None:
        program = argv[0]
        if "/" not in program:
            if self.run(["sh", "-c", 'command -v "$1"', "sh", program]).exit_code != 0:
                raise DroidheapError(f"cannot start {program}: no such program on {self.serial}")
            return
        # One round trip: 2 when not a file, 3 when not executable.
        found = self.run_script(f"test -f {shlex.quote(program)} || exit 2; "
                                f"test -x {shlex.quote(program)} || exit 3").exit_code
        if found == 2:
            raise DroidheapError(f"cannot start {program}: no such file on {self.serial}")
        if found == 3:
            raise DroidheapError(f"cannot start {program}: permission denied")
        if found != 0:
            raise DroidheapError(f"cannot start {program}: the shell of {self.serial} answered "
                                 f"status {found}")

    def program_path(self, program: str) -> Optional[str]:
        if "/" in program:
            return program
        result = self.run(["sh", "-c", 'command -v "$1"', "sh", program])
        found = result.stdout.strip()
        return found if result.exit_code == 0 and found.startswith("/") else None

    # Files ------------------------------------------------------------------------------------
    def push(self, local: pathlib.Path, remote: str, mode: int = 0o755) -> None:
        self._sync.push(local, remote, mode)

    def pull(self, remote: str, local: pathlib.Path) -> None:
        # Bounded: a phone could otherwise stream a "file" until this machine's disk is full.
        try:
            room = shutil.disk_usage(local.parent).free - PULL_DISK_RESERVE_BYTES
        except OSError as e:
            raise DroidheapError(f"cannot pull {remote}: {local.parent}: {e.strerror}") from None
        limit = max(min(PULL_MAX_BYTES, room), 0)
        found = self._sync.stat(remote)
        if found is not None and found.size > limit:
            why = (f"droidheap takes at most {PULL_MAX_BYTES}" if limit == PULL_MAX_BYTES
                   else f"{local.parent} has room for {limit} (keeping {PULL_DISK_RESERVE_BYTES} "
                        "free)")
            raise DroidheapError(f"cannot pull {remote}: it is {found.size} bytes, and {why}")
        size = found.size if found and found.size >= _PROGRESS_MIN_BYTES and watched() else 0
        with progress_bar(f"pulling {posixpath.basename(remote)}", size) as bar:
            self._sync.pull(remote, local, limit, bar.update)

    def file_size(self, remote: str) -> int:
        found = self._sync.stat(remote)
        if found is None or not stat.S_ISREG(found.mode):
            raise DroidheapError(f"no file {remote} on {self.serial}")
        return found.size

    def read_range(self, remote: str, offset: int, size: int) -> bytes:
        # Whole blocks through dd, which seeks to the first: toybox's dd has no byte offsets.
        first = offset // _RANGE_BLOCK
        count = -(-(offset + size) // _RANGE_BLOCK) - first
        script = (f"dd if={shlex.quote(remote)} bs={_RANGE_BLOCK} skip={first} count={count} "
                  "2>/dev/null")
        blocks = count * _RANGE_BLOCK
        # No slower than a pull may be (adb_sync): the same bytes pulled would get that long.
        timeout_s = _SHELL_TIMEOUT_S + blocks / MIN_PULL_RATE_BYTES_S
        result = run_command(self.adb, script, f"cannot read {remote} on {self.serial}",
                             blocks + _RANGE_MESSAGE_MAX_BYTES, timeout_s)
        if result.exit_code != 0:
            raise DroidheapError(f"cannot read {remote} on {self.serial}")
        skip = offset - first * _RANGE_BLOCK
        return bytes(memoryview(result.stdout)[skip:skip + size])  # one copy, not two

    def fetch_files(self, remotes: Sequence[str], local_dir: pathlib.Path) \
            -> Optional[pathlib.Path]:
        for remote in remotes:
            if not remote.startswith("/") or "!" in remote:
                continue  # not a plain file (a library inside an APK is found by its APK path)
            try:
                local = mirror_path(local_dir, remote)
                make_private_dirs(local.parent)
                self.pull(remote, local)
            except (DroidheapError, OSError):
                # Unreadable to the shell user, or a path that is no plain path or leads out of
                # local_dir (UnsafePath; the symbolizer warns of it): that module stays
                # unsymbolized.
                continue
        return local_dir

    def remove(self, remote: str) -> None:
        result = self.run(["rm", "-f", remote])
        platform_trace = posixpath.dirname(remote) == PLATFORM_TRACE_DIR
        # Android 10's shell may not delete a platform trace: the next session overwrites it.
        if platform_trace and (result.exit_code == 0 or self.facts.sdk < 30):
            named = PLATFORM_TRACES  # no longer one for `droidheap pull`
            self.run_script(f"grep -vxF {shlex.quote(remote)} {named} > {named}.new; "
                            f"mv {named}.new {named}")
            return
        if result.exit_code != 0:
            raise DroidheapError(f"cannot remove {remote} on {self.serial}: "
                                 f"{result.stderr.strip()}")

    # A profiling session ---------------------------------------------------------------------
    def lock(self, own_program: bool = False) -> List[str]:
        self.journal.claim()  # one session per phone: root's changes are the whole phone's
        return self.journal.repairs

    def unlock(self) -> None:
        self.journal.release()

    def leftover_traces(self) -> List[str]:
        """droidheapd's, and the platform mode's where that session died before pulling its own
        (Android 11+ names each; 10's one name is the next session's to overwrite). None of the
        platform's while a perfetto runs: the trace may be another session's, still written."""
        named = PLATFORM_TRACES
        listed = self.run_script(
            f"ls {TRACE_DIR}/{TRACE_GLOB} 2>/dev/null; pidof perfetto >/dev/null || "
            f"{{ for f in $(cat {named} 2>/dev/null); do [ -e \"$f\" ] && echo \"$f\"; done "
            f"> {named}.new && mv {named}.new {named} && cat {named}; }} 2>/dev/null",
            max_output=LISTING_MAX_BYTES)
        return sorted(set(listed.stdout.split()))  # Android 10's one name, listed again

    def check_profiler_binaries(self) -> List[str]:
        native.binary_dir(self.abi, required=self.route.files())
        abi32 = self._abi32()
        if abi32 and self._binaries32() is None:
            return [f"warning: no droidheap client for {abi32}: 32-bit processes are not "
                    f"profiled (build it with {native.build_command(abi32)})"]
        return []

    def _install_files(self) -> None:
        self.route.install(native.binary_dir(self.abi, required=self.route.files()),
                           self._binaries32())

    def install_profiler(self) -> None:
        self._install_files()
        # Journaled after the route's own changes, so undone before them: a daemon that was
        # killed leaves its socket, which goes before the platform's is moved back.
        self.journal.record(f"rm -f {shlex.quote(self.route.socket_path)}",
                            privileged=isinstance(self.route, RootRoute))

    def _abi32(self) -> Optional[str]:
        """The 32-bit ABI a 64-bit device also runs apps in, where bionic's route loads a client
        into them (the root mode; LD_PRELOAD takes one library for every program)."""
        if not self.is_64_bit or not isinstance(self.route, RootRoute):
            return None
        return next((abi for abi in self.facts.abilist if abi not in _64_BIT_ABIS), None)

    def _binaries32(self) -> Optional[pathlib.Path]:
        abi32 = self._abi32()
        try:
            return native.binary_dir(abi32, required=[native.CLIENT]) if abi32 else None
        except DroidheapError:
            return None

    def can_profile_at_start(self) -> bool:
        return self.route.name == "root"  # preload reaches only what droidheap starts

    def spawn_names_start_property(self) -> bool:
        return self.route.name == "root"  # preload's is an environment variable's value

    def unprofiled_descendants(self, name: str) -> Optional[str]:
        # Root's route is bionic's: a starting program loads the client when a property names
        # it, and heapprofd.enable=all would load it into every program the phone starts. The
        # preload library is inherited by the spawned program's descendants alone.
        if self.route.name != "root" or name not in _RUNS_OTHER_PROGRAMS:
            return None
        return (f"root mode profiles the programs {name} runs only when they are named {name}: "
                f"--mode preload profiles every one of them, -n NAME one by its name")

    def why_descendants_did_not_connect(self, name: str) -> str:
        if self.route.name == "root":
            return (f"root mode loads droidheap only into programs named {name}: --mode preload "
                    f"profiles them all")
        return ("statically linked, a malloc of their own, no allocation, or started without "
                "droidheap's LD_PRELOAD")

    def enable_at_start(self, name: str) -> None:
        self.route.enable_at_start(name)

    def disable_at_start(self, name: str) -> None:
        self.route.disable_at_start(name)

    def enable_all_at_start(self) -> None:
        self.route.enable_all_at_start()

    def disable_all_at_start(self) -> None:
        self.route.disable_all_at_start()

    def profileable_pids(self) -> List[int]:
        return self.route.profileable_pids()

    def prefer_platform_profiler(self, pids: Sequence[int]) -> bool:
        """In auto mode without root: the platform's heapprofd (Android 10+) takes targets that
        droidheap did not start, which nothing of ours can reach."""
        if not (self._auto and isinstance(self.route, PreloadRoute) and self.facts.sdk >= 29):
            return False
        for pid in pids:
            try:
                self.route.check_attachable(pid)
            except DroidheapError:
                self.platform_profiler = True
                self.mode = "platform"
                return True
        return False

    def check_attachable(self, pid: int) -> None:
        # The route asks whether the process is there with what it needs to know (in root mode
        # nothing: bionic's signal reaches any process of its libc), in the same round trip.
        self.route.check_attachable(pid)

    def start_daemon(self, args: Sequence[str]) -> DaemonProcess:
        # Its stdin is the stream's: it stops, with a final dump, when this process goes away.
        # The root mode's is root's own copy (adb_root_dir.py), never the one pushed.
        command = exec_script([f"{self.route.daemon_dir}/{native.DAEMON}", *args,
                               "--stop-when-stdin-closes"])
        script = pid_announcing(f"{command} 2>&1")
        if isinstance(self.route, RootRoute):
            script = self.privileged_script(script)
        return AdbDaemon(self, script)

    def spawn(self, argv: Sequence[str]) -> AdbProgram:
        # For the platform's heapprofd, bionic loads the platform's client: none of droidheap's.
        assignments = "" if self.platform_profiler else self.route.program_assignments()
        return AdbProgram(self, pid_announcing(exec_script(argv, assignments)))

    def spawn_held(self, argv: Sequence[str], start_name: str) -> AdbProgram:
        """Starts a program to be profiled from its start as `start_name`, held until its
        release(): its pid is known before it runs, so that droidheapd takes that process alone,
        not every process of its name (droidheap's own `sh -c` commands among them, while root's
        heapprofd.enable.<name> is set). With the preload library, every program it and its
        descendants exec loads the client at its start (DROIDHEAP_PROFILE=all, in their
        environment alone): `sh -c`, env and taskset run what is profiled."""
        assignments = self.route.program_assignments(PRELOAD_EVERY_PROGRAM)
        return AdbProgram(self, pid_announcing(exec_script(argv, assignments)), held=True)
