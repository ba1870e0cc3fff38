"""The emulated bionic: hook routes, signals and fork behave as on a phone."""
import pathlib
import time

from tests.e2e.conftest import compile_program, kill_all
from tests.e2e.trace_check import assert_trace_processor_agrees, totals_by_leaf_function

PROFILING_SIGNAL = 36  # bionic's BIONIC_SIGNAL_PROFILER, __SIGRTMIN + 4

# kill(2) made on the device: under qemu-user a signal sent from the host would reach the guest
# renumbered (qemu maps host real-time signals onto the guest's with an offset).
SEND_SIGNAL_C = r"""
#include <signal.h>
#include <stdlib.h>
int main(int argc, char** argv) {
  return argc == 3 && kill(atoi(argv[1]), atoi(argv[2])) == 0 ? 0 : 1;
}
"""


def test_plain_kill_of_the_profiling_signal_is_ignored(cli, alloc_program, abi, tmp_path):
    # bionic acts on signal 36 only when it comes from sigqueue (SI_QUEUE) with value 0.
    source = tmp_path / "send_signal.c"
    source.write_text(SEND_SIGNAL_C)
    send_signal = compile_program(source, tmp_path / "send_signal", abi)
    program = cli.start("--local", "shell", "--", alloc_program, "--wait-file", tmp_path / "go")
    try:
        line = program.stdout.readline()
        pid = int(line.split("=")[1])
        sent = cli.run("--local", "shell", "--", send_signal, pid, PROFILING_SIGNAL, timeout=60)
        assert sent.returncode == 0, sent.stderr
        time.sleep(0.3)
        assert program.poll() is None
        # Under qemu-user too the host's view of the maps holds the files the guest mapped.
        maps = pathlib.Path(f"/proc/{pid}/maps").read_text()
        assert alloc_program.name in maps
        assert "heapprofd_client.so" not in maps
        (tmp_path / "go").touch()
        assert program.wait(timeout=60) == 0
    finally:
        kill_all(program)


def test_forked_child_is_not_profiled_and_parent_continues(cli, programs, tmp_path):
    program = programs("fork_child")
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "-i", "1", "--", program)
    assert result.returncode == 0, result.stderr
    assert "child status 0 raw clone ran status 0" in result.stdout
    totals = totals_by_leaf_function(out / "raw-trace", program)
    assert len(totals) == 1  # the children never connected
    per_function = next(iter(totals.values()))
    assert per_function["parent_before_fork"].allocated == 100 * 1000
    assert per_function["parent_after_fork"].allocated == 100 * 5000
    assert "child_allocation" not in per_function
    assert "raw_clone_child_allocation" not in per_function
    assert_trace_processor_agrees(out, program, prefix="parent_")
