"""What a user sees at the end of a run, through the emulator device: the process's figures of a
program that exits right after allocating are of its exit, never a reading taken before, and the
summary says how each profile ended (it exited, with its status; its connection was lost)."""
import re

from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import parse_trace
from tests.e2e.conftest import HOST_ABI_ONLY
from tests.trace_processor import LoadedTrace

MiB = 1024 * 1024
ALLOCATED = 20 * MiB  # tests/programs/exit_at_once.c


def _only_dump(out):
    (dumps,) = rebuild_dumps(parse_trace((out / "raw-trace").read_bytes()).packets).dumps.values()
    (dump,) = dumps
    return dump


def _rss_bytes(summary: str, when: str) -> float:
    match = re.search(rf"  the process{when}: RSS ([\d.]+) MiB", summary)
    assert match, summary
    return float(match[1]) * MiB


def test_a_program_that_exits_at_once_shows_its_memory_at_exit(cli, programs, tmp_path):
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "--", programs("exit_at_once"))
    assert result.returncode == 0, result.stderr
    # Read in its exit path: the 20 MiB it wrote are resident (a reading before its allocations
    # said 2 MiB).
    assert _rss_bytes(result.stderr, " as it exited") >= ALLOCATED, result.stderr
    assert "the allocator (mallinfo) as it exited: 20.1 MiB in use" in result.stderr, \
        result.stderr
    assert "  note: the process exited with status 0" in result.stderr, result.stderr
    assert "disconnected" not in result.stderr
    dump = _only_dump(out)
    assert dump.disconnected and dump.ending == "process exited", dump
    assert dump.memory.rss_anon_kb * 1024 >= ALLOCATED, dump.memory
    # The ending is an instant on the process's track, which Perfetto reads without complaint.
    with LoadedTrace(out / "symbolized-trace") as trace:
        assert trace.problems() == []
        assert trace.rows("select s.name from slice s join process_track t on s.track_id = t.id "
                          "join process p using (upid) where s.dur = 0") == [
            {"name": "process exited"}]


@HOST_ABI_ONLY  # glibc's walk, the same on every ABI
def test_a_program_that_freed_a_large_heap_exits_without_the_allocators_walk(cli, programs,
                                                                          tmp_path):
    # glibc's mallinfo would visit its 300k free blocks (some 30 ms, more than 1% of its run):
    # the exit reads the rest and says which figures are older.
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "--", programs("exit_at_once"), "--freed", "300000")
    assert result.returncode == 0, result.stderr
    assert ("the allocator (mallinfo) as last reported (not read at exit: too slow): "
            in result.stderr), result.stderr
    assert _rss_bytes(result.stderr, " as it exited") >= ALLOCATED, result.stderr
    dump = _only_dump(out)
    assert dump.ending == "process exited" and dump.allocator.not_read_at_exit, dump
    with LoadedTrace(out / "symbolized-trace") as trace:
        assert trace.problems() == []
        assert sorted(row["name"] for row in trace.rows("select name from slice where dur = 0")) \
            == ["mallinfo: not read at exit", "process exited"]


def test_a_program_gone_without_its_exit_path_lost_its_connection(cli, programs, tmp_path):
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "--", programs("exit_at_once"), "--abrupt", "3")
    assert result.returncode == 3, result.stderr  # the program's, as `time` passes it on
    assert "exited with status 3" in result.stderr, result.stderr
    assert ("  note: it exited without droidheap's exit path, as _exit does (the process "
            "exited with status 3)") in result.stderr, result.stderr
    # Nothing read it at its end: no RSS, rather than one read before it allocated.
    assert "the process: RSS" not in result.stderr and "as it exited" not in result.stderr
    assert "the allocator (mallinfo) as last reported" in result.stderr, result.stderr
    dump = _only_dump(out)
    assert dump.ending == "connection lost" and dump.memory is None, dump
    assert "droidheapd: connection lost pid=" in (out / "droidheapd.log").read_text()


def test_a_program_killed_by_a_signal_makes_droidheap_exit_as_a_shell_says(cli, programs,
                                                                           tmp_path):
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "--", programs("exit_at_once"), "--signal", "9")
    assert result.returncode == 128 + 9, result.stderr
    assert ("  note: signal 9 ended it before droidheap's exit path ran (the process exited "
            "with status 137)") in result.stderr, result.stderr
    assert (out / "report.html").is_file()
