"""The figures beside the sampled stacks, through the emulator device: the exact totals of every
allocation and free since profiling began, and what the allocator says it holds (mallinfo), in the
trace (counter tracks of the process, as Perfetto's trace processor reads them) and the summary.
tests/programs/exact_totals.c counts its own calls as the client does and prints the count."""
import re

from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import parse_trace
from tests.trace_processor import LoadedTrace

# What else the process allocates while profiled: the C library's own blocks (stdio's buffer, a
# thread's bookkeeping) and the profiler's few (a thread's stack bounds).
EXTRA_CALLS_PER_THREAD = 8
EXTRA_BYTES_PER_THREAD = 16 * 1024


def program_counts(stdout: str) -> dict:
    match = re.search(r"allocs=(\d+) alloc_bytes=(\d+) frees=(\d+) free_bytes=(\d+)", stdout)
    assert match, stdout
    return dict(zip(("allocs", "alloc_bytes", "frees", "free_bytes"), map(int, match.groups())))


def assert_counted(exact: int, own: int, slack: int, what: str) -> None:
    assert own <= exact <= own + slack, f"{what}: the profile says {exact}, the program {own}"


def test_exact_totals_count_every_call_of_every_thread(cli, programs, tmp_path):
    threads = 40  # each ends, and a later one takes its slot
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "--", programs("exact_totals"), "300", str(threads))
    assert result.returncode == 0, result.stderr
    own = program_counts(result.stdout)
    dumps = rebuild_dumps(parse_trace((out / "raw-trace").read_bytes()).packets).dumps
    (pid, process_dumps), = dumps.items()
    totals = process_dumps[-1].totals
    assert totals is not None, process_dumps[-1]
    calls = EXTRA_CALLS_PER_THREAD * (threads + 1)
    assert_counted(totals.alloc_count, own["allocs"], calls, "allocations")
    assert_counted(totals.free_count, own["frees"], calls, "frees")
    extra = EXTRA_BYTES_PER_THREAD * (threads + 1)
    assert_counted(totals.alloc_bytes, own["alloc_bytes"], extra, "allocated bytes")
    assert_counted(totals.free_bytes, own["free_bytes"], extra, "freed bytes")
    # Profiled from its start: what was never freed is what is in use, its three blocks among it.
    own_in_use = own["alloc_bytes"] - own["free_bytes"]
    assert own_in_use <= totals.alloc_bytes - totals.free_bytes <= own_in_use + extra
    # The allocator holds at least those blocks, and took at least that much from the system.
    allocator = process_dumps[-1].allocator
    assert allocator is not None
    assert allocator.in_use_bytes >= totals.alloc_bytes - totals.free_bytes
    assert allocator.system_bytes >= allocator.in_use_bytes
    assert "exact since profiling began, usable sizes: " in result.stderr, result.stderr
    assert "the allocator (mallinfo) as it exited: " in result.stderr, result.stderr
    with LoadedTrace(out / "symbolized-trace") as trace:
        assert trace.problems() == []
        counters = {r["name"]: r["value"] for r in trace.rows(
            "select t.name, c.value from counter c join process_counter_track t "
            "on c.track_id = t.id join process p using (upid) "
            f"where p.pid = {pid} and t.name glob '*: *'")}
    assert counters["libc.malloc: allocations"] == totals.alloc_count, counters
    assert counters["mallinfo: in use bytes"] == allocator.in_use_bytes, counters


def test_every_dump_carries_the_totals_so_far(cli, alloc_program, tmp_path):
    out = tmp_path / "out"
    result = cli.run("--local", "-c", "200", "-o", out, "--", alloc_program, "--linger", "600")
    assert result.returncode == 0, result.stderr
    dumps = rebuild_dumps(parse_trace((out / "raw-trace").read_bytes()).packets).dumps
    (_, process_dumps), = dumps.items()
    assert len(process_dumps) >= 2, process_dumps
    counts = [d.totals.alloc_count for d in process_dumps]
    assert all(counts) and counts == sorted(counts), counts


def test_no_exact_totals_leaves_them_out(cli, alloc_program, tmp_path):
    out = tmp_path / "out"
    result = cli.run("--local", "--no-exact-totals", "-o", out, "--", alloc_program)
    assert result.returncode == 0, result.stderr
    dumps = rebuild_dumps(parse_trace((out / "raw-trace").read_bytes()).packets).dumps
    (_, process_dumps), = dumps.items()
    assert all(d.totals is None for d in process_dumps), process_dumps
    assert "exact since profiling began" not in result.stderr
