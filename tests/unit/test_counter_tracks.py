"""The exact heap totals and mallinfo figures read back from counter tracks beside each dump, as
the host reads them and as Perfetto's trace processor shows them."""
from droidheap.trace.process_figures import AllocatorStats, HeapTotals
from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import parse_trace
from fixtures_trace import (APP, BOOTTIME_NS, COARSE_NS, TraceBuilder, heap_counters,
                            mallinfo_counters)
from tests.trace_processor import LoadedTrace

SECOND = 10**9


def _dumps(b: TraceBuilder):
    return rebuild_dumps(parse_trace(b.to_bytes()).packets).dumps


def _rows(b: TraceBuilder, pid: int, bytes_allocated: int):
    return {pid: [(b.callstack([(APP, 0x10)]), bytes_allocated, 0, 1, 0)]}


def test_each_dump_gets_the_values_written_before_it():
    b = TraceBuilder().clock_snapshot()
    b.counters(7, {**heap_counters(10, 1000, 4, 400), **mallinfo_counters(700, 300, 4096)})
    b.dump(_rows(b, 7, 64))
    b.counters(7, {**heap_counters(20, 3000, 5, 500), **mallinfo_counters(2600, 200, 8192)},
               timestamp=BOOTTIME_NS + 2 * SECOND)
    b.dump(_rows(b, 7, 128), timestamp=COARSE_NS + 2 * SECOND)
    first, second = _dumps(b)[7]
    assert first.totals == HeapTotals(10, 1000, 4, 400)
    assert (first.totals.live_blocks, first.totals.in_use_bytes) == (6, 600)
    assert first.allocator == AllocatorStats(700, 300, 4096)
    assert second.totals == HeapTotals(20, 3000, 5, 500)
    assert second.allocator == AllocatorStats(2600, 200, 8192)


def test_totals_go_to_their_heap_and_mallinfo_to_every_heap_of_the_process():
    b = TraceBuilder()
    b.counters(7, {**heap_counters(10, 1000, 4, 400), **heap_counters(3, 30, 1, 10, heap="pool"),
                   **mallinfo_counters(700, 300, 4096)})
    # One dump of two heaps: the first fragment leaves `continued` set.
    b.dump(_rows(b, 7, 64), finished=False)
    b.dump(_rows(b, 7, 32), heap="pool")
    malloc, pool = _dumps(b)[7]
    assert (malloc.heap_name, malloc.totals) == ("libc.malloc", HeapTotals(10, 1000, 4, 400))
    assert (pool.heap_name, pool.totals) == ("pool", HeapTotals(3, 30, 1, 10))
    assert malloc.allocator == pool.allocator == AllocatorStats(700, 300, 4096)


def test_figures_that_did_not_arrive_are_unknown_not_zero():
    b = TraceBuilder()
    b.dump(_rows(b, 7, 64))  # an older daemon: no counters at all
    partial = heap_counters(10, 1000, 4, 400)
    del partial["libc.malloc: freed bytes"]
    b.counters(7, partial)
    b.dump(_rows(b, 7, 128))
    b.counters(7, mallinfo_counters(700, 300, 4096))  # no totals this time
    b.dump(_rows(b, 7, 256))
    b.counters(7, heap_counters(30, 3000, 9, 900))  # no mallinfo yet
    b.dump(_rows(b, 7, 512))
    figures = [(d.totals, d.allocator) for d in _dumps(b)[7]]
    assert figures == [(None, None), (None, None), (None, AllocatorStats(700, 300, 4096)),
                       (HeapTotals(30, 3000, 9, 900), None)]


def test_unknown_counter_names_are_ignored():
    b = TraceBuilder()
    b.counters(7, {**heap_counters(10, 1000, 4, 400), "libc.malloc: peak bytes": 5})
    b.dump(_rows(b, 7, 64))
    assert _dumps(b)[7][0].totals == HeapTotals(10, 1000, 4, 400)


def test_tracks_are_described_again_after_the_sequence_restarts():
    b = TraceBuilder()
    b.counters(7, heap_counters(10, 1000, 4, 400))
    b.dump(_rows(b, 7, 64))
    b.counters(7, heap_counters(20, 2000, 8, 800))  # no descriptors: the sequence has them
    b.dump(_rows(b, 7, 128))
    b.restart().counters(7, heap_counters(30, 3000, 9, 900))
    b.dump(_rows(b, 7, 256))
    described = [p.track_descriptor.uuid for p in b.packets if p.HasField("track_descriptor")]
    assert len(described) == 2 * 5 and described[:5] == described[5:]
    assert [d.totals.alloc_count for d in _dumps(b)[7]] == [10, 20, 30]


def test_two_processes_in_one_dump_each_get_their_own():
    b = TraceBuilder()
    b.counters(7, {**heap_counters(10, 1000, 4, 400), **mallinfo_counters(700, 300, 4096)})
    b.counters(8, heap_counters(1, 16, 0, 0))
    b.dump({**_rows(b, 7, 64), **_rows(b, 8, 32)})
    dumps = _dumps(b)
    assert (dumps[7][0].totals, dumps[7][0].allocator) == (
        HeapTotals(10, 1000, 4, 400), AllocatorStats(700, 300, 4096))
    assert (dumps[8][0].totals, dumps[8][0].allocator) == (HeapTotals(1, 16, 0, 0), None)


def test_trace_processor_shows_the_counters_on_the_process(tmp_path):
    b = TraceBuilder().clock_snapshot().process(7, "app").process(8, "other")
    b.counters(7, {**heap_counters(10, 1000, 4, 400), **mallinfo_counters(700, 300, 4096)})
    b.counters(8, heap_counters(1, 16, 0, 0))
    b.dump({**_rows(b, 7, 64), **_rows(b, 8, 32)})
    b.restart().counters(7, heap_counters(20, 2000, 8, 800), timestamp=BOOTTIME_NS + 2 * SECOND)
    b.dump(_rows(b, 7, 128), timestamp=COARSE_NS + 2 * SECOND)
    trace = tmp_path / "trace"
    trace.write_bytes(b.to_bytes())
    with LoadedTrace(trace) as loaded:
        assert loaded.problems() == []
        rows = loaded.rows("select p.pid, t.name, c.ts, c.value from counter c "
                           "join process_counter_track t on c.track_id = t.id "
                           "join process p using (upid) order by p.pid, t.name, c.ts")
    values = {}
    for r in rows:
        values.setdefault((r["pid"], r["name"]), []).append(int(r["value"]))
    assert values == {
        (7, "libc.malloc: allocated bytes"): [1000, 2000],
        (7, "libc.malloc: allocations"): [10, 20],
        (7, "libc.malloc: freed bytes"): [400, 800],
        (7, "libc.malloc: frees"): [4, 8],
        (7, "mallinfo: free bytes"): [300],
        (7, "mallinfo: in use bytes"): [700],
        (7, "mallinfo: system bytes"): [4096],
        (8, "libc.malloc: allocated bytes"): [16],
        (8, "libc.malloc: allocations"): [1],
        (8, "libc.malloc: freed bytes"): [0],
        (8, "libc.malloc: frees"): [0],
    }
