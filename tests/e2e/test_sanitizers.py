"""droidheapd built with AddressSanitizer and UndefinedBehaviorSanitizer, and with
ThreadSanitizer, profiling end to end on the emulator device (this machine's ABI; the profiled
programs and the client in them are the ordinary build): two processes at once with
--disable-fork-teardown, every allocation sampled, periodic dumps while the worker unwinds, and
the final dump; the stress program; and --unreachable, its sweeps on a thread of their own. Any
report fails the session, and so the test."""
import shutil

import pytest

from droidheap import native
from droidheap.native import host_abi
from tests.e2e.conftest import Cli, compile_program, PROGRAMS
from tests.e2e.trace_check import totals_by_leaf_function
from tests.unit.test_sanitizers import ENVIRONMENT, SANITIZERS


# The sanitized daemons are tests/unit/test_sanitizers.py's builds (MADE_EARLY), made by the other
# worker meanwhile: this module comes last in its group (tests/conftest.py, _start_order).
USES_MADE_EARLY = True

# A symbol each sanitizer's runtime brings into the binary.
RUNTIME_SYMBOL = {"asan-ubsan": b"__asan_init", "tsan": b"__tsan_init"}


@pytest.fixture(params=SANITIZERS)
def sanitized_bin_dir(request, sanitized_build, tmp_path):
    """A directory laid out as droidheap/bin: the installed emulator binaries for this machine's
    ABI, with the sanitized daemon in place of the ordinary one."""
    installed = native.binary_dir(host_abi(), target=native.LINUX,
                                  required=(native.DAEMON, native.CLIENT, native.EMULATED_LIBC))
    bin_dir = tmp_path / "bin"
    abi_dir = bin_dir / native.LINUX / host_abi()
    shutil.copytree(installed, abi_dir, symlinks=True)
    shutil.copy2(sanitized_build(SANITIZERS[request.param]) / native.DAEMON, abi_dir / native.DAEMON)
    return bin_dir, RUNTIME_SYMBOL[request.param]


def profile_with(sanitized_bin_dir, tmp_path, source, *args, flags=()):
    """Profiles tests/programs/`source` ARGS with the sanitized daemon (and droidheap `flags`);
    returns (the program, the output directory) once the daemon's log is clean."""
    device_root = tmp_path / "device"
    device_root.mkdir()
    cli = Cli(device_root, host_abi())
    bin_dir, runtime_symbol = sanitized_bin_dir
    cli.env.update(ENVIRONMENT, DROIDHEAP_BIN_DIR=str(bin_dir))
    program = compile_program(PROGRAMS / source, tmp_path / source.split(".")[0], host_abi())
    out = tmp_path / "out"
    result = cli.run("--local", "-i", "1", "-c", "50", "--disable-fork-teardown", *flags, "-o",
                     out, "--", program, *args, timeout=900)
    logs = (out / "droidheapd.log").read_text(errors="replace")
    assert result.returncode == 0, result.stderr + logs[-8000:]
    assert "droidheapd: stopped" in logs  # its log was found
    # The daemon that ran was the sanitized one.
    assert runtime_symbol in (device_root / "system" / "bin" / native.DAEMON).read_bytes()
    assert "Sanitizer" not in logs and "runtime error" not in logs, logs[-8000:]
    return program, out


def test_sanitized_daemon_profiles_cleanly(sanitized_bin_dir, tmp_path):
    program, out = profile_with(sanitized_bin_dir, tmp_path, "fork_exec.c", "fork")
    per_pid = totals_by_leaf_function(out / "raw-trace", program)
    assert len(per_pid) == 2 and all(per_pid.values()), per_pid.keys()


def test_sanitized_daemon_under_the_stress_program(sanitized_bin_dir, tmp_path):
    """tests/programs/stress.c, its forked children profiled too, at every allocation."""
    program, out = profile_with(sanitized_bin_dir, tmp_path, "stress.c", "10000")
    assert len(totals_by_leaf_function(out / "raw-trace", program)) >= 1 + 6


def test_sanitized_daemon_sweeps_for_unreachable_memory(sanitized_bin_dir, tmp_path):
    """--unreachable with a dump every 50 ms: snapshots taken by the worker, swept by its sweeper
    thread while the worker reads on, booked back; the exit's sweep as exact as ever."""
    _, out = profile_with(sanitized_bin_dir, tmp_path, "reachability.c", flags=("--unreachable",))
    logs = (out / "droidheapd.log").read_text(errors="replace")
    assert "unreachable pid=" in logs and "90 of " in logs, logs[-4000:]
