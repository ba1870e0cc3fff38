"""End-to-end fixtures: the emulator device's ABI, the test programs built for it, a fresh emulated
device, and a way to run the CLI.

Every end-to-end test runs once per ABI: x86_64 natively, arm64-v8a under qemu-user (cross compiler
g++-aarch64-linux-gnu and qemu-user, as scripts/install_test_tools sets up), but those whose
subject is the same code on any ABI (HOST_ABI_ONLY). An ABI is skipped, saying why, only when this
machine lacks qemu or the cross compiler for it; missing droidheap binaries for it are an error
(scripts/build_arm64.sh builds them).
"""
import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys

import pytest

from droidheap import native
from droidheap.device.local import QEMU_SYSROOTS
from droidheap.device.local_processes import running_daemons
from droidheap.native import host_abi
from droidheap.errors import DroidheapError

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "programs"
ABIS = ["x86_64", "arm64-v8a"]
# For a test of what runs on the host (reports, checks) or of logic that compiles to the same on
# every ABI: qemu would only make it slower.
HOST_ABI_ONLY = pytest.mark.parametrize("abi", [host_abi()], indirect=True)
# (C, C++) compilers per ABI, when it is not this machine's.
CROSS_COMPILERS = {"x86_64": ("x86_64-linux-gnu-gcc", "x86_64-linux-gnu-g++"),
                   "arm64-v8a": ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++")}
# Programs built as Android and distributions build code: optimized, no frame pointers, so that
# only call-frame information unwinds them. The rest keep frame pointers, the unwinder's fallback.
WITHOUT_FRAME_POINTERS = ("libc_sites", "signal_site", "inline_sites")


# 32-bit x86 programs are built by the host's compilers with -m32 (gcc-multilib; tests/conftest.py).
M32_ABI = "x86"


def compiler(abi: str, cxx: bool = False) -> str:
    compilers = ("cc", "c++") if abi in (host_abi(), M32_ABI) else CROSS_COMPILERS[abi]
    return compilers[1] if cxx else compilers[0]


def compile_program(source: pathlib.Path, out: pathlib.Path, abi: str) -> pathlib.Path:
    """Builds a C or C++ test program for `abi`."""
    if source.stem in WITHOUT_FRAME_POINTERS:
        flags = ["-O2", "-fomit-frame-pointer"]
    else:
        flags = ["-O1", "-fno-omit-frame-pointer"]
    if abi == M32_ABI:
        flags.append("-m32")
    else:  # droidheap/heaps.h as a user finds it: installed beside the client
        client_dir = native.binary_dir(abi, required=(native.CLIENT,), target=native.LINUX)
        flags += ["-I", str(client_dir / "include")]
    subprocess.run([compiler(abi, cxx=source.suffix == ".cc"), *flags, "-g", "-pthread",
                    str(source), "-o", str(out)], check=True)
    return out


@pytest.fixture(scope="session", params=ABIS)
def abi(request) -> str:
    name = request.param
    if name != host_abi():
        if name not in QEMU_SYSROOTS:
            pytest.skip(f"the emulator device cannot run {name} on a {host_abi()} machine")
        qemu, sysroot = QEMU_SYSROOTS[name]
        if shutil.which(qemu) is None:
            pytest.skip(f"{qemu} is not installed (Debian: apt-get install qemu-user)")
        if shutil.which(compiler(name)) is None or not os.path.isdir(sysroot):
            pytest.skip(f"no cross compiler for {name}: {compiler(name)} (Debian: apt-get install "
                        f"g++-aarch64-linux-gnu)")
    try:
        native.binary_dir(name, required=(native.DAEMON, native.CLIENT, native.EMULATED_LIBC),
                          target=native.LINUX)
    except DroidheapError as e:
        pytest.fail(e.message)
    return name


@pytest.fixture(scope="session")
def programs(abi, tmp_path_factory):
    """programs(NAME) is tests/programs/NAME.c (or .cc) built for the ABI, once per session."""
    out_dir = tmp_path_factory.mktemp(f"programs-{abi}")
    built = {}

    def get(name: str) -> pathlib.Path:
        if name not in built:
            source = PROGRAMS / f"{name}.c"
            if not source.exists():
                source = source.with_suffix(".cc")
            built[name] = compile_program(source, out_dir / name, abi)
        return built[name]

    return get


@pytest.fixture(scope="session")
def alloc_program(programs) -> pathlib.Path:
    return programs("alloc_sites")


@pytest.fixture
def device_root(tmp_path) -> pathlib.Path:
    root = tmp_path / "device"
    root.mkdir()
    return root


class Cli:
    """Runs `droidheap` on a fresh device root; `--local` gets `--abi` added for a non-host ABI."""

    def __init__(self, device_root: pathlib.Path, abi: str):
        # faulthandler: a session that hangs is asked for its Python stacks (finished()).
        self.env = dict(os.environ, DROIDHEAP_DEVICE_ROOT=str(device_root),
                        PYTHONFAULTHANDLER="1")
        self.abi = abi

    def command(self, *args):
        args = list(map(str, args))
        if "--local" in args and self.abi != host_abi():
            i = args.index("--local") + 1
            args[i:i] = ["--abi", self.abi]
        return [sys.executable, "-m", "droidheap.cli", *args]

    def run(self, *args, timeout=180):
        return ran(self.command(*args), timeout, env=self.env)

    def start(self, *args):
        """Runs the CLI in a process group of its own, which kill_all() ends with what it started."""
        return subprocess.Popen(self.command(*args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env,
                                start_new_session=True)


def kill_all(*processes):
    """SIGKILLs each still-running process started by Cli.start, with everything it started (a
    program left waiting for its go-file would be found by name by later tests)."""
    for process in processes:
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()


def _fail_not_ended(what: str, timeout_s: float, stdout, stderr, state: str = ""):
    def tail(text, size):
        text = text.decode(errors="replace") if isinstance(text, bytes) else (text or "")
        return text[-size:]
    pytest.fail(f"{what} had not ended after {timeout_s:g} s; it printed: "
                f"{tail(stdout, 2000)!r}, and on stderr: {tail(stderr, 6000)!r}{state}")


def _session_members(leader: int):
    """(pid, /proc/PID/stat's fields after the command) of the processes in `leader`'s session:
    the CLI, its programs, its droidheapd (a process group of its own)."""
    for entry in pathlib.Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except (OSError, ValueError):
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if entry.name.isdigit() and int(fields[3]) == leader:
            yield int(entry.name), stat[stat.find("(") + 1:stat.rfind(")")], fields


def _stuck_state(leader: int) -> str:
    """What the processes of a session that does not end are doing: each thread's state and
    kernel wait, and droidheapd's log (a file without a name, read through its stdout)."""
    lines = []
    for pid, comm, fields in _session_members(leader):
        threads = []
        for task in sorted(pathlib.Path(f"/proc/{pid}/task").glob("*")):
            try:
                wchan = (task / "wchan").read_text() or "-"
                state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            threads.append(f"{task.name}:{state}:{wchan}")
        lines.append(f"pid {pid} ({comm}) {fields[0]}: " + " ".join(threads))
        if "droidheapd" in comm or any("droidheapd" in arg for arg in _cmdline(pid)):
            try:
                log = pathlib.Path(f"/proc/{pid}/fd/1").read_text(errors="replace")
                lines.append(f"its log: {log[-3000:]!r}")
            except OSError:
                pass
    return "\nthe session's processes: " + "\n".join(lines) if lines else ""


def _cmdline(pid: int):
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_text(errors="replace").split("\0")
    except OSError:
        return []


def finished(process, timeout_s: float, what: str = "the session"):
    """`process`'s (stdout, stderr) once it has ended, within `timeout_s`; past that it is killed
    (with what it started, where it leads a process group) and the test fails naming `what`, what
    it had printed and, for a session of its own (Cli.start), what its processes were doing: its
    droidheapd's log and threads, and its Python stacks (SIGABRT, to faulthandler)."""
    try:
        return process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
    state = _stuck_state(process.pid)
    if state:
        process.send_signal(signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        process.kill()
    _fail_not_ended(what, timeout_s, *process.communicate(), state)


def ran(command, timeout_s: float, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run of `command`, its output captured as text; when it has not ended within
    `timeout_s` (killed then), the test fails saying what it had printed."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              **kwargs)
    except subprocess.TimeoutExpired as timed_out:
        _fail_not_ended(" ".join(map(str, command))[-300:], timeout_s, timed_out.stdout,
                        timed_out.stderr)


@pytest.fixture
def cli(device_root, abi) -> Cli:
    return Cli(device_root, abi)


def daemon_pids(device_root: pathlib.Path):
    """The droidheapd processes serving `device_root` (not those of other sessions on this host),
    run directly or under qemu-user."""
    return running_daemons(str(device_root / "system" / "bin" / native.DAEMON))
