"""The Linux emulator device: runs the device side on this machine.

Its state lives in a device root directory that outlives one CLI run, so a process started by
`droidheap --local shell` can be attached to by a later run:

    <root>/properties                 system properties ("key=value" lines, replaced atomically)
    <root>/system/bin/droidheapd      the daemon, as pushed by a session
    <root>/system/lib64/              heapprofd_client.so and the emulated libc (the layer that
                                      stands in for bionic and is preloaded into every program)
    <root>/dev/socket/heapprofd       the daemon's socket
    <root>/data/misc/perfetto-traces  traces
    <root>/runs/<name>                a link to the root of a session that started its own program
                                      while another held this one (LocalDevice.lock)

Programs started here get the emulated libc preloaded and DROIDHEAP_DEVICE_ROOT set; with the
arm64-v8a ABI on an x86_64 machine they run under qemu-aarch64.
"""
import fcntl
import os
import pathlib
import shlex
import shutil
import subprocess
import tempfile
import time
from typing import Dict, List, Optional, Sequence

from droidheap import native
from droidheap.device.base import TRACE_GLOB, DaemonProcess, Device, DeviceLayout
from droidheap.device.local_daemon import start_local_daemon
from droidheap.device.local_processes import host_pids, host_program_names, running_daemons
from droidheap.device.names import START_PROPERTY, start_properties
from droidheap.errors import DroidheapError
from droidheap.output_files import copy_output
from droidheap.program_allocator import asan_options

ROOT_ENV = "DROIDHEAP_DEVICE_ROOT"
_OWN_ROOT_PREFIX = "droidheap-device-"  # a session's root of its own (LocalDevice.lock)
_ORPHAN_STOP_TIMEOUT_S = 15.0
QEMU_SYSROOTS = {"arm64-v8a": ("qemu-aarch64", "/usr/aarch64-linux-gnu")}


def default_root() -> pathlib.Path:
    if os.environ.get(ROOT_ENV):
        return pathlib.Path(os.environ[ROOT_ENV])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return pathlib.Path(cache) / "droidheap" / "device"


def read_properties(root: pathlib.Path) -> Dict[str, str]:
    """The property store of the emulator device at `root` (also the test adbd's, tests/adbd)."""
    try:
        text = (root / "properties").read_text()
    except FileNotFoundError:
        return {}
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def write_properties(root: pathlib.Path, updates: Dict[str, str]) -> None:
    """Sets (or, with value "", clears) properties. Not safe against concurrent writers: the
    caller serialises them (one session per device root; the test adbd's property service)."""
    current = read_properties(root)
    for key, value in updates.items():
        if "\n" in key or "=" in key or "\n" in value:
            raise DroidheapError(f"invalid property {key!r}")
        if value:
            current[key] = value
        else:
            current.pop(key, None)
    fd, tmp = tempfile.mkstemp(dir=root, prefix=".properties.")
    with os.fdopen(fd, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in sorted(current.items())))
    os.chmod(tmp, 0o644)  # world-readable, as properties are on a phone (mkstemp makes it 0600)
    # Replaced, never rewritten in place: the emulation layer reads it without a lock.
    os.replace(tmp, root / "properties")


def _start_properties(name: str, value: str) -> Dict[str, str]:
    """What bionic reads at start to load the client into programs named `name`."""
    return dict.fromkeys(start_properties(name), value)


def _copy_atomically(source: pathlib.Path, target: pathlib.Path) -> None:
    # A running program may have the old file mapped: replace it, never overwrite it in place.
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(fd)
    shutil.copy2(source, tmp)
    os.replace(tmp, target)


def _open_lock(root: pathlib.Path):
    """The root's session lock file, opened to be flock'ed: never through a link planted at its
    name, never truncated (it holds nothing)."""
    fd = os.open(root / "session.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    return os.fdopen(fd, "r+b")


def _remove_own_root(root: pathlib.Path, link: pathlib.Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    link.unlink(missing_ok=True)


def _remove_abandoned(runs: pathlib.Path) -> None:
    """The roots of their own that sessions gone (their lock free) left with no trace in them:
    only ours, a directory named so in the temporary directory."""
    for link in runs.glob("*"):
        root = link.resolve()
        if (root.parent != pathlib.Path(tempfile.gettempdir()).resolve()
                or not root.name.startswith(_OWN_ROOT_PREFIX) or not root.is_dir()):
            link.unlink(missing_ok=True)
            continue
        try:
            with _open_lock(root) as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if not list((root / "data" / "misc" / "perfetto-traces").glob(TRACE_GLOB)):
                    _remove_own_root(root, link)
        except OSError:  # held (BlockingIOError)
            continue



class LocalDevice(Device):
    files_are_this_machines = True

    def __init__(self, root: Optional[pathlib.Path] = None, abi: Optional[str] = None):
        self.root = pathlib.Path(root or default_root()).resolve()
        self.abi = abi or native.host_abi()
        if self.abi not in native.LINUX_BUILD_COMMANDS:
            raise DroidheapError(f"unknown ABI {self.abi}: use x86_64 or arm64-v8a")
        self._runner: List[str] = []
        # A session's root of its own (lock), and its link in the shared root's runs/.
        self._own_root: Optional[pathlib.Path] = None
        self._own_link: Optional[pathlib.Path] = None
        if self.abi != native.host_abi():
            if self.abi not in QEMU_SYSROOTS:
                raise DroidheapError(f"the emulated device cannot run {self.abi} on this machine")
            qemu, sysroot = QEMU_SYSROOTS[self.abi]
            if shutil.which(qemu) is None:
                raise DroidheapError(f"{qemu} is not installed (Debian: apt-get install qemu-user)")
            self._runner = [qemu, "-L", sysroot]
        self._lay_out()
        self._lock_file = None

    def _lay_out(self) -> None:
        # Its owner's alone: traces, properties naming programs, the socket sessions listen on.
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            if self.root.stat().st_mode & 0o077 and self.root.stat().st_uid == os.geteuid():
                self.root.chmod(0o700)  # made by an older droidheap
        except OSError as e:
            raise DroidheapError(f"cannot prepare the emulated device at {self.root}: "
                                 f"{e.strerror}") from None
        self.layout = DeviceLayout(
            bin_dir=str(self.root / "system" / "bin"),
            lib_dir=str(self.root / "system" / "lib64"),
            socket_path=str(self.root / "dev" / "socket" / "heapprofd"),
            trace_dir=str(self.root / "data" / "misc" / "perfetto-traces"),
            tmp_dir=str(self.root / "data" / "local" / "tmp"),
        )
        for directory in (self.layout.bin_dir, self.layout.lib_dir, self.layout.trace_dir,
                          self.layout.tmp_dir, os.path.dirname(self.layout.socket_path)):
            try:
                os.makedirs(directory, exist_ok=True)
            except OSError as e:
                raise DroidheapError(f"cannot prepare the emulated device at {self.root}: "
                                     f"{e.strerror}: {directory}") from None

    def describe(self) -> str:
        return f"the emulated device at {self.root} ({self.abi})"

    # Session lock ----------------------------------------------------------------------------
    def lock(self, own_program: bool = False) -> List[str]:
        """One profiling session per device root at a time. A session that starts its own
        program needs nothing of the shared root (no process running there, no property another
        session reads): when another session holds it, this one takes a root of its own, in the
        temporary directory (the daemon's socket path under it must fit sockaddr_un's 108 bytes,
        wherever the shared root is), listed by a link in the shared root's runs/ and removed at
        unlock (kept while a trace is left in it)."""
        if self._claim(self.root):
            return self._wait_for_orphan_daemon()
        if not own_program:
            raise DroidheapError(f"another droidheap session is using {self.describe()}: one "
                                 "session at a time attaches to its processes (a program "
                                 "droidheap starts, -- CMD, runs on a device root of its own)")
        shared, runs = self.root, self.root / "runs"
        _remove_abandoned(runs)
        try:
            runs.mkdir(exist_ok=True)
            self.root = pathlib.Path(tempfile.mkdtemp(prefix=_OWN_ROOT_PREFIX)).resolve()
            self._own_link = runs / self.root.name
            self._own_link.symlink_to(self.root)
        except OSError as e:
            raise DroidheapError(f"cannot prepare a device root of its own: {e}") from None
        self._own_root = self.root
        self._lay_out()
        self._claim(self.root)
        return [f"note: another droidheap session is using the emulated device at {shared}: "
                f"this one runs at {self.root}"]

    def _claim(self, root: pathlib.Path) -> bool:
        try:
            self._lock_file = _open_lock(root)
        except OSError as e:  # a link at its name (ELOOP), or no room
            raise DroidheapError(f"cannot open the session lock of {self.describe()}: "
                                 f"{e.strerror}") from None
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            self._lock_file = None
            return False
        return True

    def _wait_for_orphan_daemon(self) -> List[str]:
        # The lock was free: a daemon still running lost its droidheap, and stops on its own
        # (its lifeline closed) once it has written its last dump.
        deadline = time.monotonic() + _ORPHAN_STOP_TIMEOUT_S
        while running_daemons(self._daemon_path):
            if time.monotonic() > deadline:
                pid = running_daemons(self._daemon_path)[0]
                self._lock_file.close()
                self._lock_file = None
                raise DroidheapError(f"droidheapd pid {pid} of an earlier session still runs on "
                                     f"{self.describe()}")
            time.sleep(0.05)
        return []

    def unlock(self) -> None:
        if self._lock_file is not None:
            # A daemon that was killed leaves its socket; the lock's holder owns it.
            pathlib.Path(self.layout.socket_path).unlink(missing_ok=True)
            self._lock_file.close()
            self._lock_file = None
        if self._own_root is not None and not self.leftover_traces():
            _remove_own_root(self._own_root, self._own_link)

    def leftover_traces(self) -> List[str]:
        return sorted(map(str, pathlib.Path(self.layout.trace_dir).glob(TRACE_GLOB)))

    # Files -----------------------------------------------------------------------------------
    @property
    def _daemon_path(self) -> str:
        return str(pathlib.Path(self.layout.bin_dir) / native.DAEMON)

    @property
    def emulated_libc(self) -> pathlib.Path:
        return pathlib.Path(self.layout.lib_dir) / native.EMULATED_LIBC

    def _install_emulated_libc(self) -> None:
        source = native.binary_dir(self.abi, required=(native.EMULATED_LIBC,),
                                  target=native.LINUX) / native.EMULATED_LIBC
        target = self.emulated_libc
        if (not target.exists() or target.stat().st_size != source.stat().st_size
                or target.read_bytes() != source.read_bytes()):
            _copy_atomically(source, target)

    def check_profiler_binaries(self) -> List[str]:
        native.binary_dir(self.abi, target=native.LINUX)
        return []

    def install_profiler(self) -> None:
        binaries = native.binary_dir(self.abi, target=native.LINUX)
        self._install_emulated_libc()
        _copy_atomically(binaries / native.DAEMON, pathlib.Path(self._daemon_path))
        _copy_atomically(binaries / native.CLIENT, pathlib.Path(self.layout.lib_dir) / native.CLIENT)

    def pull(self, remote: str, local: pathlib.Path) -> None:
        try:
            copy_output(pathlib.Path(remote), local)
        except OSError as e:
            raise DroidheapError(f"cannot pull {remote}: {e.strerror}") from None

    def file_size(self, remote: str) -> int:
        try:
            return os.stat(remote).st_size
        except OSError as e:
            raise DroidheapError(f"cannot read {remote}: {e.strerror}") from None

    def read_range(self, remote: str, offset: int, size: int) -> bytes:
        try:
            with open(remote, "rb") as f:
                f.seek(offset)
                return f.read(size)
        except OSError as e:
            raise DroidheapError(f"cannot read {remote}: {e.strerror}") from None

    def remove(self, remote: str) -> None:
        pathlib.Path(remote).unlink(missing_ok=True)

    # Properties ------------------------------------------------------------------------------
    def properties(self) -> Dict[str, str]:
        return read_properties(self.root)

    def set_properties(self, properties: Dict[str, str]) -> None:
        write_properties(self.root, properties)

    def enable_at_start(self, name: str) -> None:
        self.set_properties(_start_properties(name, "1"))

    def disable_at_start(self, name: str) -> None:
        self.set_properties(_start_properties(name, ""))

    def enable_all_at_start(self) -> None:
        self.set_properties({START_PROPERTY: "all"})

    # The emulated device's programs are those started on it, under its lock: every one loads
    # the client, so that what `sh -c`, env or taskset exec is profiled, and droidheapd refuses
    # all but the spawned program's descendants.
    def enable_spawned_at_start(self, name: str) -> None:
        self.enable_all_at_start()

    def disable_spawned_at_start(self, name: str) -> None:
        self.disable_all_at_start()

    def spawn_names_start_property(self) -> bool:
        return False  # every program started on it: g++ and c++ too

    def disable_all_at_start(self) -> None:
        self.set_properties({START_PROPERTY: ""})

    # Processes -------------------------------------------------------------------------------
    def profileable_pids(self) -> List[int]:
        """The processes running with this device's emulated libc (of its ABI)."""
        return sorted(pid for pid in host_pids() if self._runs_here(pid))

    def pidof(self, name: str) -> List[int]:
        """The processes named `name` on this device: those running with its emulated libc. When
        only processes elsewhere on the host have that name, says why they are not on it."""
        named = [pid for pid, program in host_program_names().items() if program == name]
        on_device = [pid for pid in sorted(named) if self._runs_here(pid)]
        if named and not on_device:
            self.check_attachable(min(named))  # raises, saying where that process runs
        return on_device

    def program_names(self) -> Dict[int, str]:
        return {pid: name for pid, name in host_program_names().items()
                if self._runs_here(pid)}

    def _runs_here(self, pid: int) -> bool:
        try:
            self.check_attachable(pid)
        except DroidheapError:
            return False
        return True

    def process_exists(self, pid: int) -> bool:
        return pathlib.Path(f"/proc/{pid}").is_dir()

    def check_attachable(self, pid: int) -> None:
        # The profiling signal's default action is to kill: only a process with the emulated libc
        # (which handles it, as bionic does on a phone) may receive it.
        try:
            maps = pathlib.Path(f"/proc/{pid}/maps").read_text(errors="replace")
        except OSError:
            raise DroidheapError(f"cannot read the memory map of pid {pid}") from None
        paths = {line.split(maxsplit=5)[5] for line in maps.splitlines()
                 if len(line.split(maxsplit=5)) == 6}
        libcs = {p for p in paths if os.path.basename(p) == native.EMULATED_LIBC}
        if not libcs:
            raise DroidheapError(
                f"pid {pid} was not started on the emulated device (no emulated libc in its "
                f"memory map); start it with: droidheap --local shell -- COMMAND")
        if str(self.emulated_libc) not in libcs:
            raise DroidheapError(f"pid {pid} runs on another emulated device ({sorted(libcs)[0]})")
        try:
            exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        except OSError:
            exe = ""
        emulated = exe.startswith("qemu-")
        if emulated != bool(self._runner):
            abi = "arm64-v8a" if emulated else native.host_abi()
            raise DroidheapError(f"pid {pid} runs as {abi}: use --abi {abi}")

    def check_program(self, argv: Sequence[str]) -> None:
        self._program_command(argv)

    def program_path(self, program: str) -> Optional[str]:
        resolved = program if "/" in program else shutil.which(program)
        return resolved if resolved is not None and os.path.isfile(resolved) else None

    def _program_command(self, argv: Sequence[str]) -> List[str]:
        program = argv[0]
        resolved = self.program_path(program)
        if resolved is None:
            raise DroidheapError(f"cannot start {program}: no such program")
        if not os.access(resolved, os.X_OK):
            raise DroidheapError(f"cannot start {program}: permission denied")
        if self._runner:
            return [*self._runner, "-E", f"LD_PRELOAD={self.emulated_libc}",
                    "-E", f"{ROOT_ENV}={self.root}", resolved, *argv[1:]]
        return [resolved, *argv[1:]]

    def _program_env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env[ROOT_ENV] = str(self.root)
        env["ASAN_OPTIONS"] = asan_options(env.get("ASAN_OPTIONS"))
        if not self._runner:
            preload = env.get("LD_PRELOAD", "")
            env["LD_PRELOAD"] = f"{self.emulated_libc} {preload}".strip()
        return env

    def spawn(self, argv: Sequence[str]) -> subprocess.Popen:
        self._install_emulated_libc()
        command = self._program_command(argv)
        try:
            return subprocess.Popen(command, env=self._program_env())
        except OSError as e:
            raise DroidheapError(f"cannot start {argv[0]}: {e.strerror}") from None

    def spawn_held(self, argv: Sequence[str], start_name: str) -> "HeldProgram":
        """As on adb devices: the pid is known before the program runs, so that droidheapd takes
        that process (and its descendants) alone, not every process of the name that the device
        starts meanwhile."""
        self._install_emulated_libc()
        command = self._program_command(argv)
        env = self._program_env()
        # The holding shell runs without the emulated libc (it would read the start properties
        # as it starts, racing their setting); the program gets it at its exec.
        preload = env.pop("LD_PRELOAD", None)
        original = os.environ.get("LD_PRELOAD")
        if original is not None:
            env["LD_PRELOAD"] = original
        try:
            return HeldProgram(command, env, preload)
        except OSError as e:
            raise DroidheapError(f"cannot start {argv[0]}: {e.strerror}") from None

    def shell(self, argv: Sequence[str]) -> int:
        process = self.spawn(argv)
        while True:
            try:
                code = process.wait()
                break
            except KeyboardInterrupt:
                continue  # the program got the Ctrl-C too; its exit code tells what it did
        return 128 - code if code < 0 else code

    def start_daemon(self, args: Sequence[str]) -> DaemonProcess:
        return start_local_daemon([*self._runner, self._daemon_path, *args,
                                   "--stop-when-stdin-closes"], self.layout.tmp_dir)


class HeldProgram(subprocess.Popen):
    """A program started held: a shell that waits for a line on a pipe of its own, then execs
    the program (same pid) with `preload` as its LD_PRELOAD. Never released (droidheap gone), the
    shell reads end-of-file and exits 125 without running it."""

    def __init__(self, command: Sequence[str], env: Dict[str, str], preload: Optional[str]):
        read_end, self._release_end = os.pipe()
        export = (f"LD_PRELOAD={shlex.quote(preload)}; export LD_PRELOAD; "
                  if preload is not None else "")
        script = (f"read -r _ <&{read_end} || exit 125; exec {read_end}<&-; "
                  f'{export}exec "$@"')
        try:
            super().__init__(["/bin/sh", "-c", script, "sh", *command], env=env,
                             pass_fds=(read_end,))
        except OSError:
            os.close(self._release_end)
            raise
        finally:
            os.close(read_end)

    def release(self) -> None:
        try:
            os.write(self._release_end, b"go\n")
        except OSError:
            pass  # the shell is gone: its exit status says so
        finally:
            os.close(self._release_end)
