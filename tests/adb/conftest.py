"""A real adb server on a private port (never the user's), talking to test adbds
(scripts/test_adbd) over TCP: the path a phone takes, minus the phone. Every server and adbd
started here is stopped at the end, whatever the tests did.

Parametrised over both adb binaries: Google's (36, shipped in adbutils' wheel, the one users get)
and Debian's older adb 29 when it is installed. A test whose subject is not the link to the device
(a session, a flag, the device's own rules) runs through one of them (ONE_ADB_SERVER): the two
servers differ in how they carry bytes and report devices, which the link's own tests see.
"""
import dataclasses
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, Iterator, List, Optional

import adbutils
import pytest

from droidheap import native
from droidheap.native import host_abi
from tests.android import RELEASES, AndroidRelease
from tests.conftest import why_no_m32
from tests.e2e.conftest import compile_program, ran
from tests.requirements import require

ROOT = pathlib.Path(__file__).resolve().parents[2]
ADB_BINARIES = {
    "adb36": pathlib.Path(adbutils.__file__).parent / "binaries" / "adb",
    "adb29": pathlib.Path("/usr/bin/adb"),
}
_MISSING = {"adb29": "Debian's adb is not installed (apt-get install adb)",
            "adb36": "adbutils' wheel ships no adb for this machine"}
# The server of the tests that need one but not a given one: the one users get, else Debian's.
ONE_ADB_SERVER = pytest.mark.parametrize(
    "adb_server", [next((name for name in ("adb36", "adb29") if ADB_BINARIES[name].is_file()),
                        "adb36")], indirect=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def device_binaries() -> pathlib.Path:
    """The test device's bionic is the emulation layer: the binaries droidheap pushes to it are
    the Linux emulator's for this machine's ABI."""
    return native.binary_dir(host_abi(), required=(native.EMULATED_LIBC,), target=native.LINUX)


def device_bin_dir(directory: pathlib.Path,
                   other_abis: Optional[Dict[str, pathlib.Path]] = None) -> pathlib.Path:
    """`directory`, laid out as droidheap/bin for $DROIDHEAP_BIN_DIR: the test device's binaries
    as Android's for this machine's ABI, and those of `other_abis` (ABI: build directory)."""
    directory.mkdir(parents=True, exist_ok=True)
    for abi, build in {host_abi(): device_binaries(), **(other_abis or {})}.items():
        (directory / abi).symlink_to(build)
    return directory


@dataclasses.dataclass
class AdbdProcess:
    process: subprocess.Popen
    port: int

    @property
    def serial(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_test_adbd(root: bool = False, abi: str = "",
                    libc32: Optional[pathlib.Path] = None,
                    android: Optional[AndroidRelease] = None) -> AdbdProcess:
    """A test adbd: the emulator device, or with `android` that Android's own userland."""
    device = ["--android", str(android.rootfs)] if android else \
        ["--libc", str(device_binaries() / native.EMULATED_LIBC)]
    process = subprocess.Popen([str(ROOT / "scripts" / "test_adbd"), "--port", "0", *device,
                                *(["--root"] if root else []),
                                *(["--abi", abi] if abi else []),
                                *(["--libc32", str(libc32)] if libc32 else [])],
                               stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline().strip()
    if not line.startswith("listening on 127.0.0.1:"):
        process.kill()
        raise RuntimeError(f"test_adbd did not start: {line!r}")
    return AdbdProcess(process, int(line.rsplit(":", 1)[1]))


@dataclasses.dataclass
class AdbServer:
    binary: pathlib.Path
    port: int
    # droidheap's binaries for the emulator devices ($DROIDHEAP_BIN_DIR); None: the installed
    # Android binaries, as the Android devices (real bionic) take.
    bin_dir: Optional[pathlib.Path]

    @property
    def env(self) -> Dict[str, str]:
        """What droidheap (and adb) must see to use this server and this binary, and the test
        device's binaries."""
        env = {"ANDROID_ADB_SERVER_PORT": str(self.port), "ADBUTILS_ADB_PATH": str(self.binary)}
        if self.bin_dir is not None:
            env["DROIDHEAP_BIN_DIR"] = str(self.bin_dir)
        return env

    def adb(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "ANDROID_SERIAL"}
        env.update(self.env)
        return subprocess.run([str(self.binary), *args], env=env, capture_output=True, text=True,
                              timeout=30, check=check)

    def states(self) -> Dict[str, str]:
        lines = self.adb("devices").stdout.splitlines()[1:]
        return dict(line.split("\t", 1) for line in lines if "\t" in line)

    def connect(self, adbd: AdbdProcess) -> str:
        self.adb("connect", adbd.serial)
        deadline = time.monotonic() + 10
        while self.states().get(adbd.serial) != "device":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{adbd.serial} did not come online: {self.states()}")
            time.sleep(0.05)
        return adbd.serial

    def disconnect_all(self) -> None:
        self.adb("disconnect", check=False)


def serve_adb(name: str, tmp_path_factory, android: bool = False) -> Iterator[AdbServer]:
    """A started adb server of ADB_BINARIES[name], killed after the tests that use it; droidheap
    run against it pushes the emulator devices' binaries, or with `android` Android's."""
    binary = ADB_BINARIES[name]
    require(None if binary.is_file() else _MISSING[name])
    server = AdbServer(binary, free_port(),
                       None if android else device_bin_dir(tmp_path_factory.mktemp("device-bin")))
    server.adb("start-server")
    yield server
    server.adb("kill-server", check=False)


@pytest.fixture(scope="module", params=sorted(ADB_BINARIES))
def adb_server(request, tmp_path_factory):
    yield from serve_adb(request.param, tmp_path_factory)


@pytest.fixture
def adb_env(adb_server, monkeypatch):
    """droidheap in this process uses the test's adb server, and no $ANDROID_SERIAL of the user."""
    for key, value in adb_server.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)
    return adb_server


def _connected_test_adbd(adb_server: AdbServer, root: bool,
                         libc32: Optional[pathlib.Path] = None,
                         android: Optional[AndroidRelease] = None) -> Iterator[AdbdProcess]:
    adbd = start_test_adbd(root=root, libc32=libc32, android=android)
    try:
        adb_server.connect(adbd)
        yield adbd
    finally:
        adb_server.adb("disconnect", adbd.serial, check=False)
        adbd.stop()


@pytest.fixture(scope="module")
def shell_device(adb_server):
    """A test device whose adbd runs as the shell user (a user build), connected to the server."""
    yield from _connected_test_adbd(adb_server, root=False)


@pytest.fixture(scope="module")
def root_device(adb_server, request):
    """A test device whose adbd runs as root (a userdebug build after `adb root`), running 32-bit
    programs too where this machine builds them (-m32)."""
    libc32 = None
    if why_no_m32() is None:
        libc32 = request.getfixturevalue("native_build_i386") / native.EMULATED_LIBC
    yield from _connected_test_adbd(adb_server, root=True, libc32=libc32)


@pytest.fixture(scope="module", params=sorted(RELEASES))
def android_release(request) -> AndroidRelease:
    """Which Android the Android test devices run: 10 (arm64, under qemu-user) and 11 (x86_64,
    natively). A test that only one of them can run asks for it with
    `@pytest.mark.parametrize("android_release", [NAME], indirect=True)`."""
    release = RELEASES[request.param]
    release.require()
    return release


@pytest.fixture(scope="module")
def android_root_device(adb_server, android_release):
    """The Android test device (that Android's userland, tests/adbd/android_root.py) with adbd
    running as root, connected to the server."""
    yield from _connected_test_adbd(adb_server, root=True, android=android_release)


@pytest.fixture(scope="module")
def android_shell_device(adb_server, android_release):
    """The Android test device with adbd running as the shell user (a user build's adbd)."""
    yield from _connected_test_adbd(adb_server, root=False, android=android_release)


@pytest.fixture
def extra_adbds():
    """Test adbds a test starts for itself (e.g. a second device), stopped after it."""
    started: List[AdbdProcess] = []
    yield started
    for adbd in started:
        adbd.stop()


def device_state(adb_server: AdbServer, serial: str) -> str:
    """What a session changes on a device and must put back, and what a test must leave as it
    found it: the properties, the platform's heapprofd (its service and socket), its clients of
    each bitness (nothing mounted over them), the platform's traces, droidheap's session files (its
    pushed binaries stay: droidheap shell needs them). A property set empty reads as an unset one
    (Android never forgets a property's name); the platform's traced sets and clears its lazy
    services' own on a timer of its own (traced.lazy.heapprofd, 30 s after a session). Two
    programs besides the shell's builtins: each costs ~70 ms under qemu-user."""
    files = " ".join(["/dev/socket/*", "/data/misc/perfetto-traces/*", f"{PROFILER_DIR}/traces/*",
                      *(f"{directory}/{name}" for directory in (PROFILER_DIR, ROOT_DIR)
                        for name in ("session.lock", "undo", "droidheapd.socket"))])
    said = adb_server.adb("-s", serial, "shell", (
        f"getprop; md5sum /system/lib*/heapprofd_client.so; for f in {files}; do "
        "[ -e \"$f\" ] && echo \"$f\"; done; while read -r line; do case $line in "
        "*heapprofd_client*) echo \"mounted: $line\";; esac; done < /proc/self/mountinfo"),
        check=False).stdout
    return "".join(line for line in said.splitlines(keepends=True)
                   if not line.rstrip().endswith(": []") and not line.startswith("[traced.lazy."))


# The fixtures whose values are test devices: each a device's AdbdProcess, or (serial, mode).
_DEVICE_FIXTURES = ("device", "shell_device", "root_device", "android_root_device",
                    "android_shell_device")
_DEVICE_STATES = pytest.StashKey()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Notes the state of the test devices a test uses as it begins (its fixtures all made)."""
    adb_server = item.funcargs.get("adb_server")
    if adb_server is not None:
        serials = [value[0] if isinstance(value, tuple) else value.serial
                   for name, value in item.funcargs.items() if name in _DEVICE_FIXTURES]
        item.stash[_DEVICE_STATES] = (adb_server, {serial: device_state(adb_server, serial)
                                                   for serial in serials})
    yield


@pytest.fixture(autouse=True)
def _leaves_devices_as_they_were(request):
    """A test leaves each test device it used as it found it (device_state), whether it failed or
    not: checked once its own fixtures are torn down."""
    yield
    adb_server, before = request.node.stash.get(_DEVICE_STATES, (None, {}))
    changed = []
    for serial, state in before.items():
        now = device_state(adb_server, serial)
        if now != state:
            gone = sorted(set(state.splitlines()) - set(now.splitlines()))
            new = sorted(set(now.splitlines()) - set(state.splitlines()))
            changed.append(f"{serial}: gone {gone}, new {new}")
    if changed:
        pytest.fail("the test changed its devices: " + "; ".join(changed), pytrace=False)


# Whole sessions: the test program on a device of each mode, and droidheap's CLI against it.
DEVICE_PROGRAM = "/data/local/tmp/alloc_sites"
PROFILER_DIR = "/data/local/tmp/droidheap"
ROOT_DIR = "/data/local/droidheap"  # root's copies and journal, on a rooted device


@pytest.fixture(scope="module")
def local_program(tmp_path_factory):
    return compile_program(ROOT / "tests" / "programs" / "alloc_sites.c",
                           tmp_path_factory.mktemp("adb-programs") / "alloc_sites", host_abi())


@pytest.fixture(params=["preload", "root"])
def device(request, adb_server, local_program):
    """(serial, mode) of a device with the test program pushed to /data/local/tmp."""
    adbd = request.getfixturevalue("shell_device" if request.param == "preload" else "root_device")
    adb_server.adb("-s", adbd.serial, "push", str(local_program), DEVICE_PROGRAM)
    return adbd.serial, request.param


def kill_device_program(pid):
    """The test device is this machine: a program a failed test left waiting would wait forever
    (and be found by name by the next test). Only while the pid is still the test program's: one
    that ended long ago may be another process's by now (the other worker's tests)."""
    if pid is None:
        return
    try:
        command = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
        if DEVICE_PROGRAM.encode() in command:
            os.kill(pid, signal.SIGKILL)
    except (FileNotFoundError, ProcessLookupError):
        pass


class AdbCli:
    def __init__(self, adb_server, serial):
        self.serial = serial
        self.adb_server = adb_server
        self.env = {k: v for k, v in os.environ.items() if k != "ANDROID_SERIAL"}
        self.env.update(adb_server.env)
        self.platform_state_before = self.platform_state()

    def command(self, *args):
        return [sys.executable, "-m", "droidheap.cli", "-s", self.serial, *map(str, args)]

    def run(self, *args, timeout=180):
        return ran(self.command(*args), timeout, env=self.env, cwd=ROOT)

    def start(self, *args):
        return subprocess.Popen(self.command(*args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env, cwd=ROOT,
                                start_new_session=True)

    def shell(self, script: str) -> str:
        return self.adb_server.adb("-s", self.serial, "shell", script, check=False).stdout

    def platform_state(self) -> str:
        return device_state(self.adb_server, self.serial)

    def assert_left_as_it_was(self):
        deadline = time.monotonic() + 15
        while self.shell("pidof droidheapd").strip() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert self.shell("pidof droidheapd").strip() == ""
        # The pushed binaries stay (droidheap shell needs them); the session's state does not.
        ours = self.shell(f"ls {PROFILER_DIR} {PROFILER_DIR}/traces {ROOT_DIR}").split()
        assert not {"session.lock", "undo", "droidheapd.socket"} & set(ours), ours
        assert not [name for name in ours if name.endswith(".trace")], ours
        assert self.platform_state() == self.platform_state_before


@pytest.fixture
def cli(adb_server, device):
    return AdbCli(adb_server, device[0])
