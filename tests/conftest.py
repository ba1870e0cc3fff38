"""Shared fixtures: the native tree built once per test session (with its unit tests), for the
host and, on an x86_64 host, for 32-bit x86 with -m32; and which tests may run beside which.

scripts/test runs the suite in two processes (pytest-xdist, --dist loadgroup). Tests that run
programs in this machine's process space, where every other test's processes are seen too, share
one of them (THIS_MACHINES_PROCESSES): the emulator device is this machine (its `pidof`,
`killall` and --all see every process here), `--local` sessions look processes up by name, and the
Android test devices' processes, though in namespaces of their own, are seen from here by name
(alloc_sites, droidheapd). The others (builds, fuzzers, unit tests) run beside them."""
import os
import pathlib
import platform
import random
import shutil
import subprocess
import tempfile
import time
from typing import Optional, Tuple

import pytest

from tests import timeline

from tests.build_lock import build_lock
from tests.leftovers import Leftovers
from tests.requirements import require

ROOT = pathlib.Path(__file__).resolve().parent.parent
THIS_MACHINES_PROCESSES = pytest.mark.xdist_group("this_machines_processes")
# Every test of these directories runs programs through a device; tests elsewhere that do say so
# with `pytestmark = THIS_MACHINES_PROCESSES`.
_DEVICE_TEST_DIRS = (ROOT / "tests" / "e2e", ROOT / "tests" / "adb")
I386_TOOLCHAIN = ROOT / "ndk_client" / "cmake" / "i386-linux-gnu.cmake"
_LEFTOVERS = pytest.StashKey()
_PROGRAM_DIRS = pytest.StashKey()
_STARTED = pytest.StashKey()  # (time, timeline.cpu_times()) as the run started


def _build_native(build: pathlib.Path, *cmake_args: str, env=None) -> pathlib.Path:
    """Configures and builds ndk_client/ with the native tests into `build`, with line tables
    for debug information (CMakeLists.txt: DROIDHEAP_DEBUG_INFO): nothing of it ships."""
    with build_lock(build):
        build.mkdir(parents=True, exist_ok=True)
        for command in (["cmake", "-S", str(ROOT / "ndk_client"), "-B", str(build),
                         "-DDROIDHEAP_BUILD_TESTS=ON", "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                         "-DDROIDHEAP_DEBUG_INFO=lines", *cmake_args],
                        ["cmake", "--build", str(build), "-j", str(os.cpu_count() or 2)]):
            result = subprocess.run(command, capture_output=True, text=True,
                                    env=None if env is None else dict(os.environ, **env))
            if result.returncode != 0:
                raise AssertionError(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}"
                                     f"{result.stderr[-3000:]}")
    return build


def why_no_m32() -> Optional[str]:
    """Why this machine cannot build and run 32-bit x86 C++ programs; None when it can."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"32-bit x86 builds need an x86_64 host, not {platform.machine()}"
    with tempfile.TemporaryDirectory() as tmp:
        probe = subprocess.run(["g++", "-m32", "-x", "c++", "-", "-o", os.path.join(tmp, "probe")],
                               input="#include <atomic>\nint main() { return 0; }\n",
                               capture_output=True, text=True)
    if probe.returncode != 0:
        return "g++ -m32 cannot build (Debian: apt-get install g++-N-multilib for g++ N)"
    return None


@pytest.fixture(scope="session")
def native_build() -> pathlib.Path:
    """The host's build of ndk_client/ with the native tests; returns the build directory."""
    return _build_native(ROOT / "build" / "native-tests")


@pytest.fixture(scope="session")
def native_build_i386() -> pathlib.Path:
    """The 32-bit x86 build (-m32) of ndk_client/ with the native tests. Skipped, saying why, when
    this machine cannot build it (failed in CI, where CI is set)."""
    require(why_no_m32())
    return _build_native(ROOT / "build" / "native-tests-i386",
                         f"-DCMAKE_TOOLCHAIN_FILE={I386_TOOLCHAIN}")


# The ASan+UBSan tree holds the libFuzzer targets too where clang builds it: one tree for both,
# not two (a hundred seconds of a run's CPU).
_FUZZED_SANITIZERS = "address,undefined"


def _clang_missing() -> Optional[str]:
    return None if shutil.which("clang++") else ("clang is not installed (Debian: apt-get install "
                                                 "clang; scripts/install_test_tools installs it)")


@pytest.fixture(scope="session")
def sanitized_build():
    """sanitized_build("address,undefined" or "thread"): the host's build of ndk_client/ with its
    native tests under those sanitizers (CMakeLists.txt: DROIDHEAP_SANITIZE), built once. The
    ASan+UBSan tree is clang's with the fuzzers (fuzz/) when clang is here, else the default
    compiler's without them."""
    built = {}

    def get(sanitizers: str) -> pathlib.Path:
        if sanitizers not in built:
            name = "native-" + sanitizers.replace(",", "-")
            options, env = [f"-DDROIDHEAP_SANITIZE={sanitizers}"], None
            if sanitizers == _FUZZED_SANITIZERS and _clang_missing() is None:
                # A tree of its own name: CMake cannot move a configured tree to another compiler
                # (it forgets the tree's options when it does).
                name += "-clang"
                options.append("-DDROIDHEAP_BUILD_FUZZERS=ON")
                env = {"CC": "clang", "CXX": "clang++"}
            built[sanitizers] = _build_native(ROOT / "build" / name, *options, env=env)
        return built[sanitizers]

    return get


@pytest.fixture(scope="session")
def fuzz_build(sanitized_build) -> pathlib.Path:
    """The tree of the libFuzzer targets (ndk_client/fuzz/): clang's ASan+UBSan one."""
    require(_clang_missing())
    return sanitized_build(_FUZZED_SANITIZERS)


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Symbols and device files cached by the tests (and the CLI they run) go to a directory of
    this session, not the user's cache: no test sees what an earlier run learnt."""
    os.environ["DROIDHEAP_CACHE_DIR"] = str(tmp_path_factory.mktemp("droidheap-cache"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Notes the processes running as a test of THIS_MACHINES_PROCESSES begins (its fixtures all
    made, those it asked for by name too)."""
    program_dirs = item.stash.get(_PROGRAM_DIRS, None)
    if program_dirs is not None:
        item.stash[_LEFTOVERS] = Leftovers(program_dirs)
    yield


@pytest.fixture(autouse=True)
def _leaves_nothing_running(request, tmp_path_factory):
    """A test of THIS_MACHINES_PROCESSES leaves no process of its own running (tests/leftovers.py):
    checked once its other fixtures are torn down, whether it failed or not."""
    if request.node.get_closest_marker("xdist_group") == THIS_MACHINES_PROCESSES.mark:
        # The test programs: built in this worker's temporary directory, pushed to a device's.
        request.node.stash[_PROGRAM_DIRS] = [str(tmp_path_factory.getbasetemp()), "/data/local/"]
    yield
    leftovers = request.node.stash.get(_LEFTOVERS, None)
    left = leftovers.check() if leftovers is not None else ""
    if left:
        pytest.fail(f"the test left these running (killed now): {left}", pytrace=False)


def pytest_configure(config):
    """The controller (the one process without pytest-xdist) names the file its workers note
    their tests' times in (tests/timeline.py)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        handle, path = tempfile.mkstemp(prefix="droidheap-timeline-")
        os.close(handle)
        os.environ[timeline.ENVIRONMENT] = path
        config.stash[_STARTED] = (time.time(), timeline.cpu_times())


# The niceness of a worker's other tests (mostly builds, which keep both cores busy) and what
# they start: THIS_MACHINES_PROCESSES runs serially in one worker and is the run's longest part
# (tests/timeline.py), so its processes get the cores first and the builds the time it leaves.
OTHER_TESTS_NICENESS = 10


def _run_at_niceness(item) -> None:
    """This worker and what it starts from now on run at the niceness `item`'s group asks for.
    Left as it is where it cannot be lowered again (not root) or without workers."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    in_group = item.get_closest_marker("xdist_group") == THIS_MACHINES_PROCESSES.mark
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 0 if in_group else OTHER_TESTS_NICENESS)
    except PermissionError:
        pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _run_at_niceness(item)
    start, cpu = time.time(), timeline.cpu_seconds()
    yield
    path = os.environ.get(timeline.ENVIRONMENT)
    if path:
        timeline.note(pathlib.Path(path), item.nodeid, start, time.time(),
                      timeline.cpu_seconds() - cpu)


def pytest_terminal_summary(terminalreporter, config):
    """Per worker, where the run's wall time went, when there were workers."""
    if _STARTED not in config.stash:
        return
    path = pathlib.Path(os.environ[timeline.ENVIRONMENT])
    started, cpu = config.stash[_STARTED]
    said = timeline.summary(path, started)
    if len(said) > 3:  # two lines a worker, one of CPU time
        terminalreporter.write_line("where the time went (tests/timeline.py):")
        for line in [*said, timeline.cores_busy(cpu, timeline.cpu_times())]:
            if line:
                terminalreporter.write_line(f"  {line}")
    path.unlink(missing_ok=True)


def pytest_addoption(parser):
    parser.addoption("--shuffle", type=int, metavar="SEED", default=None,
                     help="Runs the modules, and each module's tests, in an order drawn from "
                          "SEED (the same in every worker).")


def pytest_report_header(config):
    seed = config.getoption("--shuffle")
    return None if seed is None else f"shuffled: --shuffle {seed}"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the groups
def pytest_collection_modifyitems(config, items):
    """Each test's group: THIS_MACHINES_PROCESSES, or its module's own (a module's fixtures, such
    as a build, are then made once, by the process that runs the whole module). With --shuffle,
    a seeded order: modules shuffled, and the tests within each (a module's fixtures, such as a
    test device, are still made once)."""
    for item in items:
        if any(directory in item.path.parents for directory in _DEVICE_TEST_DIRS):
            item.add_marker(THIS_MACHINES_PROCESSES)
        elif item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
    seed = config.getoption("--shuffle")
    if seed is not None:
        items[:] = _shuffled(items, random.Random(seed))
    items.sort(key=_start_order)


def _start_order(item) -> Tuple[int, int]:
    """pytest-xdist hands the groups out in the order of their first tests (scripts/test:
    --no-loadscope-reorder): THIS_MACHINES_PROCESSES first, the longest, to one worker; then the
    modules that make what it uses (MADE_EARLY: the wheels, the -m32 and sanitized builds), to
    the other, early; then those that take minutes (RUNS_LONG), and the short ones last, which
    whichever worker is free takes: a long module handed out last kept one worker busy for
    minutes after the other had finished (tests/timeline.py). Within THIS_MACHINES_PROCESSES,
    the modules that use what a MADE_EARLY module makes (USES_MADE_EARLY) come last: taken
    early, the group, the run's longest, waited minutes for the other worker's build, or made
    it itself."""
    module = getattr(item, "module", None)
    if item.get_closest_marker("xdist_group") == THIS_MACHINES_PROCESSES.mark:
        return 0, 1 if getattr(module, "USES_MADE_EARLY", False) else 0
    if getattr(module, "MADE_EARLY", False):
        return 1, 0
    return (2 if getattr(module, "RUNS_LONG", False) else 3), 0


def _shuffled(items, draw: random.Random) -> list:
    by_module = {}
    for item in items:
        by_module.setdefault(item.path, []).append(item)
    modules = sorted(by_module)  # the same order in every worker before the draw
    draw.shuffle(modules)
    order = []
    for module in modules:
        tests = sorted(by_module[module], key=lambda item: item.nodeid)
        draw.shuffle(tests)
        order += tests
    return order
