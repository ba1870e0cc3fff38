"""What droidheapd's sweep for unreachable memory (--unreachable) puts in a trace, read back: its
blocks by call stack as the heap "libc.malloc.unreachable" under a root frame of its own, its
figures as counters, its notes as instant events (ndk_client/daemon/unreachable_heap.h,
counter_tracks.h); as the host reads them (trace/heap_dumps.py, results/from_trace.py), as pprof
files show them, and as Perfetto's trace processor reads the same trace."""
import pathlib

from droidheap.pprof import PprofWriter
from droidheap.results.from_trace import profiles_from_dumps
from droidheap.symbolizer import SymbolTable
from droidheap.trace.heap_dumps import UNREACHABLE_HEAP, UNREACHABLE_ROOT, rebuild_dumps
from droidheap.trace.process_figures import UnreachableSweep
from droidheap.trace.reader import parse_trace
from fixtures_trace import APP, BOOTTIME_NS, COARSE_NS, FakeMapping, TraceBuilder
from tests.trace_processor import LoadedTrace

SECOND = 10**9
ROOT = FakeMapping(UNREACHABLE_ROOT, start=0, end=0)
A = [(APP, 0x2000), (APP, 0x3000)]
B = [(APP, 0x2000), (APP, 0x4000)]


def _sweep(blocks_swept: int, blocks: int, nbytes: int, held_ns: int = 5000, listed=None):
    """A sweep's counters; without `listed`, as droidheap wrote them before the allocator's lists
    (read as 0: not listed)."""
    listing = {} if listed is None else {"unreachable: blocks listed": listed}
    return {"unreachable: blocks swept": blocks_swept, "unreachable: blocks": blocks,
            "unreachable: bytes": nbytes, "unreachable: threads held": held_ns, **listing}


def _two_dumps() -> TraceBuilder:
    """Two dumps of pid 7: at the first, A's 64 bytes in 2 blocks are unreachable; at the second,
    A's are no longer (a stale word kept them, say) and B's 32 bytes are, as droidheapd writes
    it: cumulative, what no longer is unreachable "freed"."""
    b = TraceBuilder().clock_snapshot().process(7, "app")
    a, b_stack = b.callstack(A), b.callstack(B)
    rooted_a, rooted_b = b.callstack([(ROOT, 0)] + A), b.callstack([(ROOT, 0)] + B)
    b.counters(7, _sweep(10, 2, 60))
    b.dump({(7, "libc.malloc"): [(a, 96, 0, 3, 0), (b_stack, 48, 0, 1, 0)],
            (7, UNREACHABLE_HEAP): [(rooted_a, 64, 0, 2, 0)]})
    b.counters(7, _sweep(12, 1, 30), timestamp=BOOTTIME_NS + 2 * SECOND)
    b.ending(7, "unreachable memory: registers not read", timestamp=BOOTTIME_NS + 2 * SECOND)
    b.dump({(7, "libc.malloc"): [(a, 96, 0, 3, 0), (b_stack, 48, 0, 1, 0)],
            (7, UNREACHABLE_HEAP): [(rooted_a, 64, 64, 2, 2), (rooted_b, 32, 0, 1, 0)]},
           timestamp=COARSE_NS + 2 * SECOND)
    return b


def _dumps(b: TraceBuilder):
    return rebuild_dumps(parse_trace(b.to_bytes()).packets)


def test_the_unreachable_heap_joins_libcs_dump_with_libcs_stacks():
    dumps = _dumps(_two_dumps()).dumps[7]
    assert [d.heap_name for d in dumps] == ["libc.malloc", "libc.malloc"]
    first, second = dumps
    assert first.unreachable == UnreachableSweep(True, 10, 2, 60, 5000, "", listed_blocks=0)
    assert second.unreachable == UnreachableSweep(True, 12, 1, 30, 5000, "registers not read",
                                                  listed_blocks=0)
    libc_stacks = {s.frames for s in first.samples}
    assert [(s.in_use, s.alloc_count - s.free_count) for s in first.unreachable_samples] == [(64, 2)]
    assert {s.frames for s in first.unreachable_samples} <= libc_stacks
    # What the second sweep found: B's, and A's no longer.
    found = {s.frames[-1].rel_pc: (s.in_use, s.alloc_count - s.free_count)
             for s in second.unreachable_samples}
    assert found == {0x3000: (0, 0), 0x4000: (32, 1)}


def test_profiles_carry_the_verdict_and_say_when_it_is_exact():
    b = _two_dumps()
    profiles = profiles_from_dumps(_dumps(b), SymbolTable({}))
    first = profiles[0].unreachable
    assert (first.swept, first.complete, first.blocks, first.bytes, first.held_ns) == (
        True, False, 2, 60, 5000)
    assert (first.estimated_bytes, first.estimated_count) == (64, 2)
    # The same call stacks as the heap's (CallStacks, leaf first).
    assert {s.stack for s in first.samples} <= {s.stack for s in profiles[0].samples}
    assert profiles[1].unreachable.estimated_bytes == 32
    assert profiles[1].unreachable.listed_blocks == 0

    listed = TraceBuilder()
    listed.counters(7, _sweep(3, 1, 16, listed=5000))
    listed.dump({7: [(listed.callstack(A), 48, 0, 3, 0)]})
    assert profiles_from_dumps(_dumps(listed), SymbolTable({}))[0].unreachable.listed_blocks == 5000

    exact = TraceBuilder()
    stack = exact.callstack(A)
    exact.counters(7, _sweep(3, 1, 16))
    exact.dump({(7, "libc.malloc"): [(stack, 48, 0, 3, 0)],
                (7, UNREACHABLE_HEAP): [(exact.callstack([(ROOT, 0)] + A), 16, 0, 1, 0)]},
               interval=1, from_startup=True)
    assert profiles_from_dumps(_dumps(exact), SymbolTable({}))[0].unreachable.complete


def test_a_sweep_that_did_not_run_says_why_and_shows_no_stale_verdict():
    b = _two_dumps()
    b.ending(7, "unreachable memory: not swept: its threads could not be stopped")
    a = b.callstack(A)
    b.dump({(7, "libc.malloc"): [(a, 96, 0, 3, 0)],
            (7, UNREACHABLE_HEAP): [(b.callstack([(ROOT, 0)] + B), 32, 0, 1, 0)]},
           timestamp=COARSE_NS + 3 * SECOND)
    third = _dumps(b).dumps[7][2]
    assert third.unreachable == UnreachableSweep(False, note="its threads could not be stopped")
    assert third.unreachable_samples == []
    profile = profiles_from_dumps(_dumps(b), SymbolTable({}))[2].unreachable
    assert (profile.swept, profile.blocks, profile.samples) == (False, None, [])


def test_a_run_without_unreachable_has_none():
    b = TraceBuilder()
    b.dump({7: [(b.callstack(A), 64, 0, 1, 0)]})
    dump = _dumps(b).dumps[7][0]
    assert (dump.unreachable, dump.unreachable_samples) == (None, [])
    assert profiles_from_dumps(_dumps(b), SymbolTable({}))[0].unreachable is None


def test_pprof_gets_two_sample_types_when_the_sweep_ran(tmp_path):
    dumps = _dumps(_two_dumps())
    writer = PprofWriter(SymbolTable({}))
    profiles = [writer.profile(d) for d in dumps.dumps[7]]
    for p, unreachable in zip(profiles, (64, 32)):
        types = [p.string_table[t.type] for t in p.sample_type]
        assert types == ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space",
                         "unreachable_objects", "unreachable_space"]
        assert all(len(s.value) == 6 for s in p.sample)
        assert sum(s.value[3] for s in p.sample) == 144  # the heap's in use, as without
        assert sum(s.value[5] for s in p.sample) == unreachable
    # The unreachable samples' stacks are the heap's: no root frame of droidheap's.
    locations = {loc.id: loc for loc in profiles[0].location}
    unreachable = [s for s in profiles[0].sample if s.value[5]]
    assert [len(s.location_id) for s in unreachable] == [2]
    assert locations[unreachable[0].location_id[0]].mapping_id != 0

    plain = TraceBuilder()
    plain.dump({7: [(plain.callstack(A), 64, 0, 1, 0)]})
    p = writer.profile(_dumps(plain).dumps[7][0])
    assert len(p.sample_type) == 4 and all(len(s.value) == 4 for s in p.sample)


def test_trace_processor_reads_both_heaps_apart(tmp_path: pathlib.Path):
    trace = tmp_path / "trace"
    trace.write_bytes(_two_dumps().to_bytes())
    with LoadedTrace(trace) as loaded:
        assert loaded.problems() == []
        rows = loaded.rows("select heap_name, ts, sum(size) as size from heap_profile_allocation "
                           "group by heap_name, ts order by heap_name, ts")
    in_use = {}
    for r in rows:
        in_use[r["heap_name"]] = in_use.get(r["heap_name"], 0) + int(r["size"])
    # Cumulative over the dumps: what the last dump says is in use, or unreachable.
    assert in_use == {"libc.malloc": 144, UNREACHABLE_HEAP: 32}
