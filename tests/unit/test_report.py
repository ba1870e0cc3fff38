"""The text summary: the sampled estimate, then the exact totals and the allocator's figures when
the trace has them, then what the kernel said."""
import dataclasses

from droidheap.results.load import profiles_from_dumps
from droidheap.results.summary import format_summary, summarize
from droidheap.symbolizer import SymbolTable
from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import parse_trace
from fixtures_trace import APP, TraceBuilder, heap_counters, mallinfo_counters

MIB = 2**20


def _summaries(b: TraceBuilder):
    dumps = rebuild_dumps(parse_trace(b.to_bytes()).packets)
    return summarize(dumps, profiles_from_dumps(dumps, SymbolTable({})))


def _trace(counters: bool) -> TraceBuilder:
    b = TraceBuilder().process(7, "app").process_stats(7, rss_kb=4096, rss_anon_kb=2048)
    if counters:
        b.counters(7, {**heap_counters(100000, 12 * MIB, 99000, 11 * MIB),
                       **mallinfo_counters(MIB + MIB // 5, 300 * 1024, 2 * MIB)})
    b.dump({7: [(b.callstack([(APP, 0x10)]), 8192, 4096, 2, 1)]})
    return b


def test_exact_totals_and_mallinfo_come_between_the_sampled_line_and_rss():
    lines = format_summary(_summaries(_trace(counters=True))).splitlines()
    assert lines[1:4] == [
        "  sampled: allocated 8.0 KiB in 2 objects, in use at the last dump 4.0 KiB in 1 objects",
        "  exact since profiling began: 100000 allocations (12.0 MiB), 99000 frees (11.0 MiB); "
        "1000 blocks, 1.0 MiB in use",
        "  the allocator (mallinfo): 1.2 MiB in use, 300.0 KiB free, 2.0 MiB taken from the system",
    ]
    assert lines[4].startswith("  the process: RSS 4.0 MiB")


def test_summary_keeps_the_last_dump_figures_that_arrived():
    b = _trace(counters=True)
    b.dump({7: [(b.callstack([(APP, 0x10)]), 16384, 4096, 4, 1)]})  # no counters this time
    (summary,) = _summaries(b)
    assert summary.totals.alloc_count == 100000 and summary.allocator.system_bytes == 2 * MIB


def test_figures_the_trace_lacks_print_nothing():
    text = format_summary(_summaries(_trace(counters=False)))
    assert "exact since" not in text and "mallinfo" not in text


def test_exact_line_prints_beside_a_peak_too():
    (summary,) = _summaries(_trace(counters=True))
    lines = format_summary([dataclasses.replace(summary, at_peak=True)]).splitlines()
    assert lines[1] == "  sampled: in use at the peak of the sampled heap 4.0 KiB in 1 objects"
    assert lines[2].startswith("  exact since profiling began: 100000 allocations")
