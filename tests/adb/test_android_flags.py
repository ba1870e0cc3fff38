"""heap_profile's flags that change which processes and heaps a session takes, on real bionic:
the Android 11 test device (natively), in both modes (root: bionic's hooks load the client;
preload: bionic's linker loads it from LD_PRELOAD). Fork teardown and --disable-fork-teardown
(bionic's fork and its pthread_atfork handlers), --all-heaps with droidheap/heaps.h in the
program; each as tests/e2e tests it on --local, where the emulation layer stands in for bionic.
(--all is in test_android_sessions.py for root, test_flags.py for preload's reach.)"""
import pytest

from tests.android import compile_android_program
from tests.e2e.test_forks import BLOCKS, CHILD_BYTES, pids_of
from tests.e2e.test_heaps import ROUNDS, assert_exact_totals, last_dumps
from tests.e2e.trace_check import totals_by_leaf_function

from .conftest import ROOT, AdbCli, serve_adb

pytestmark = pytest.mark.parametrize("android_release", ["android11"], indirect=True)


@pytest.fixture(scope="module")
def adb_server(tmp_path_factory):
    """Google's adb (as test_android_sessions.py), droidheap pushing its Android binaries."""
    yield from serve_adb("adb36", tmp_path_factory, android=True)


@pytest.fixture(params=["root", "preload"])
def cli(request, adb_server) -> AdbCli:
    """A root device (adbd as root) or a user build's (adbd as the shell user: preload mode)."""
    device = request.getfixturevalue("android_root_device" if request.param == "root"
                                     else "android_shell_device")
    return AdbCli(adb_server, device.serial)


def push_program(cli: AdbCli, release, name: str, tmp_path):
    """tests/programs/<name>.c built as the NDK builds app code, pushed: (local, remote)."""
    program = compile_android_program(ROOT / "tests" / "programs" / f"{name}.c", tmp_path / name,
                                      release.abi, include_dirs=[ROOT / "ndk_client" / "include"])
    remote = f"/data/local/tmp/{name}"
    cli.adb_server.adb("-s", cli.serial, "push", str(program), remote)
    return program, remote


@pytest.mark.parametrize("teardown", [True, False])
def test_a_forked_child_is_torn_down_or_profiled_as_its_own(cli, android_release, tmp_path,
                                                           teardown):
    program, remote = push_program(cli, android_release, "fork_exec", tmp_path)
    out = tmp_path / "out"
    flags = [] if teardown else ["--disable-fork-teardown"]
    result = cli.run("-i", "1", *flags, "-o", out, "--", remote, "fork")
    assert result.returncode == 0, result.stderr
    parent, child = pids_of(result.stdout)
    per_pid = totals_by_leaf_function(out / "raw-trace", program)
    assert set(per_pid) == ({parent} if teardown else {parent, child}), per_pid.keys()
    assert per_pid[parent]["parent_after_fork"].allocated == BLOCKS * 5000
    assert "child_allocation" not in per_pid[parent]
    if not teardown:
        assert per_pid[child]["child_allocation"].allocated == CHILD_BYTES
        assert "parent_before_fork" not in per_pid[child]
    cli.assert_left_as_it_was()


def test_custom_heaps_get_their_pprof_and_exact_totals(cli, android_release, tmp_path):
    """The program's heaps.h registry is found whichever route loaded the client; each heap gets
    its pprof and exact totals; the dump carries the process's RSS as it exited."""
    _, remote = push_program(cli, android_release, "custom_heap", tmp_path)
    out = tmp_path / "out"
    result = cli.run("--all-heaps", "-i", "1", "-o", out, "--", remote, str(ROUNDS))
    assert result.returncode == 0, result.stderr
    pid, dumps = last_dumps(out)
    assert set(dumps) == {"libc.malloc", "pool", "arena"}, dumps.keys()
    for heap in ("pool", "arena"):
        assert_exact_totals(dumps[heap], result.stdout)
        assert (out / f"heap_dump.0.{pid}.{heap}.pb.gz").is_file()
    assert "the process as it exited: RSS " in result.stderr, result.stderr
    cli.assert_left_as_it_was()
