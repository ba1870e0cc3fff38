"""Exact totals of a process attached while it runs, through the emulator device: it goes on
freeing blocks it allocated before the attach, which must not be booked against what it allocated
since (issue 40: "-1 blocks, -96 B in use"). Its allocations since the attach are exact and in the
trace; its frees, which the client cannot tell apart without a set of every block, are written
under names of their own ("frees (older blocks too)"), so no figure of what is in use is made from
them. A process profiled from its start keeps its frees as such (test_totals.py)."""
from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import parse_trace
from tests.trace_processor import LoadedTrace

from .conftest import compile_program
from .test_profile import profile_attached

# Allocates OLD blocks, waits for the go-file (allocating and freeing a little every 10 ms, so
# that the profiling signal's hook fires), then frees every old block and allocates NEW, freeing
# half of them.
SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
enum { OLD = 1000, NEW = 10 };
int main(int argc, char** argv) {
  const char* go = argc > 2 ? argv[2] : "go";
  static void* volatile old[OLD];
  static void* volatile fresh[NEW];
  static void* volatile beat;
  for (int i = 0; i < OLD; i++) old[i] = malloc(96);
  printf("waiting pid=%d\n", (int)getpid());
  fflush(stdout);
  while (access(go, F_OK) != 0) {
    beat = malloc(16);
    free(beat);
    usleep(10000);
  }
  for (int i = 0; i < OLD; i++) free(old[i]);
  for (int i = 0; i < NEW; i++) fresh[i] = malloc(96);
  for (int i = 0; i < NEW / 2; i++) free(fresh[i]);
  printf("done\n");
  return 0;
}
"""


def test_frees_of_blocks_older_than_the_attach_are_not_booked(cli, abi, tmp_path):
    source = tmp_path / "frees_old_blocks.c"
    source.write_text(SOURCE)
    program = compile_program(source, tmp_path / "frees_old_blocks", abi)
    out = tmp_path / "out"
    pid = profile_attached(cli, [program], out, 1)
    dumps = rebuild_dumps(parse_trace((out / "raw-trace").read_bytes()).packets).dumps
    assert dumps[pid][-1].totals is None, dumps[pid][-1].totals  # no frees: no in-use figure
    with LoadedTrace(out / "symbolized-trace") as trace:
        counters = {r["name"]: r["value"] for r in trace.rows(
            "select t.name, c.value from counter c join process_counter_track t "
            "on c.track_id = t.id join process p using (upid) "
            f"where p.pid = {pid} and t.name glob 'libc.malloc: *'")}
    # Every allocation since the attach, exactly: the new blocks and the heartbeat's, 96 and 16
    # bytes at their usable sizes.
    assert counters["libc.malloc: allocations"] >= 10, counters
    assert counters["libc.malloc: allocated bytes"] >= 10 * 96, counters
    assert "libc.malloc: frees" not in counters and "libc.malloc: freed bytes" not in counters
    # Every free since, the old blocks' among them, under names that say so.
    assert counters["libc.malloc: frees (older blocks too)"] >= 1000 + 5, counters
    assert counters["libc.malloc: freed bytes (older blocks too)"] >= (1000 + 5) * 96, counters


def test_a_process_profiled_from_its_start_keeps_its_frees(cli, abi, tmp_path):
    source = tmp_path / "frees_old_blocks.c"
    source.write_text(SOURCE)
    program = compile_program(source, tmp_path / "frees_old_blocks", abi)
    out = tmp_path / "out"
    go = tmp_path / "go"
    go.touch()
    result = cli.run("--local", "-o", out, "-i", "1", "--", program, "--wait-file", go)
    assert result.returncode == 0, result.stderr
    (pid, process_dumps), = rebuild_dumps(
        parse_trace((out / "raw-trace").read_bytes()).packets).dumps.items()
    totals = process_dumps[-1].totals
    assert totals is not None
    assert totals.free_count >= 1000 + 5 and totals.live_blocks >= 5, totals
    assert "exact since profiling began, usable sizes: " in result.stderr, result.stderr
