"""Traces whose dumps hold a custom heap beside libc.malloc, or instead of it, as droidheapd writes
them with --heaps or --all-heaps: in each dump one ProcessHeapSamples per heap of the process, and
before it each heap's exact totals as counters of their own ("pool: allocations", ...). Every heap
of every dump becomes a pprof file of its own and a section of its own in the summary."""
import gzip
from typing import Sequence

from droidheap.convert import convert_trace
from droidheap.pprof import Profile
from droidheap.trace.process_figures import HeapTotals
from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import parse_trace
from fixtures_trace import (APP, BOOTTIME_NS, COARSE_NS, TraceBuilder, heap_counters,
                            mallinfo_counters)

PID = 7
SECOND = 10**9
# Per heap, its call site and, per dump, its sample (allocated, freed, allocations, frees) and its
# exact totals (allocations, allocated bytes, frees, freed bytes).
SITES = {"libc.malloc": 0x3000, "pool": 0x4000, "arena": 0x5000}
DUMPS = {
    "libc.malloc": [((8192, 4096, 2, 1), HeapTotals(10, 1000, 4, 400)),
                    ((16384, 4096, 4, 1), HeapTotals(20, 2000, 5, 500))],
    "pool": [((512, 256, 2, 1), HeapTotals(3, 768, 1, 256)),
             ((1024, 256, 4, 1), HeapTotals(6, 1536, 1, 256))],
    "arena": [((3000, 0, 3, 0), HeapTotals(3, 3000, 0, 0)),
              ((6000, 6000, 6, 6), HeapTotals(6, 6000, 6, 6000))],
}


def _trace(heaps: Sequence[str]) -> TraceBuilder:
    """Two dumps of one process holding `heaps`, in that order."""
    b = TraceBuilder().clock_snapshot().process(PID, "app")
    stacks = {heap: b.callstack([(APP, 0x2000), (APP, SITES[heap])]) for heap in heaps}
    for index in range(2):
        b.process_stats(PID, rss_kb=2048, rss_anon_kb=1024)
        counters = mallinfo_counters(4096, 1024, 8192)  # the process's, whatever it records
        for heap in heaps:
            totals = DUMPS[heap][index][1]
            counters.update(heap_counters(totals.alloc_count, totals.alloc_bytes,
                                          totals.free_count, totals.free_bytes, heap=heap))
        b.counters(PID, counters, timestamp=BOOTTIME_NS + (index + 1) * SECOND)
        b.dump({(PID, heap): [(stacks[heap], *DUMPS[heap][index][0])] for heap in heaps},
               timestamp=COARSE_NS + (index + 1) * SECOND)
    return b


def _convert(tmp_path, heaps: Sequence[str]):
    raw = tmp_path / "raw-trace"
    raw.write_bytes(_trace(heaps).to_bytes())
    return convert_trace(raw, tmp_path / "out")


def _profile(path) -> Profile:
    return Profile.FromString(gzip.decompress(path.read_bytes()))


def _comments(profile) -> list:
    return [profile.string_table[i] for i in profile.comment]


def _sampled(profile) -> tuple:
    """(alloc_space, inuse_space) over the profile's samples."""
    return (sum(s.value[1] for s in profile.sample), sum(s.value[3] for s in profile.sample))


def test_heaps_of_one_dump_share_its_index_and_keep_their_own_totals():
    dumps = rebuild_dumps(parse_trace(_trace(["libc.malloc", "pool"]).to_bytes()).packets)
    assert [(d.index, d.heap_name, d.totals) for d in dumps.dumps[PID]] == [
        (index, heap, DUMPS[heap][index][1]) for index in range(2)
        for heap in ("libc.malloc", "pool")]
    assert [len(d.samples) for d in dumps.dumps[PID]] == [1, 1, 1, 1]


def test_each_heap_of_each_dump_gets_its_pprof_with_its_samples_and_totals(tmp_path):
    result = _convert(tmp_path, ["libc.malloc", "pool"])
    assert sorted(p.name for p in result.pprof_paths) == [
        "heap_dump.0.7.libc.malloc.pb.gz", "heap_dump.0.7.pool.pb.gz",
        "heap_dump.1.7.libc.malloc.pb.gz", "heap_dump.1.7.pool.pb.gz"]
    for f in result.pprof_files:
        (allocated, freed, _, _), totals = DUMPS[f.heap_name][f.dump_index]
        profile = _profile(f.path)
        comments = _comments(profile)
        assert (f"droidheap dump {f.dump_index} of pid {PID}, heap {f.heap_name}, sampling "
                "interval 4096 bytes") in comments
        sizes = ", usable sizes" if f.heap_name == "libc.malloc" else ""
        assert (f"exact since profiling began{sizes}: {totals.alloc_count} allocations "
                f"({totals.alloc_bytes} bytes), {totals.free_count} frees "
                f"({totals.free_bytes} bytes)") in comments, (f.path.name, comments)
        assert _sampled(profile) == (allocated, allocated - freed), f.path.name


def test_summary_has_a_section_per_heap_with_its_exact_totals(tmp_path):
    result = _convert(tmp_path, ["libc.malloc", "pool"])
    assert [(p.pid, p.heap_name, p.dumps, p.allocated, p.in_use, p.totals)
            for p in result.processes] == [
        (PID, "libc.malloc", 2, 16384, 12288, HeapTotals(20, 2000, 5, 500)),
        (PID, "pool", 2, 1024, 768, HeapTotals(6, 1536, 1, 256))]
    sections = result.summary_text.split("\n\n")
    assert sections[0].startswith("pid 7 (app), heap libc.malloc, 2 dumps")
    # libc's figures say which sizes they count; a custom heap reports one size for both.
    assert ("  exact since profiling began, usable sizes: 20 allocations (2.0 KiB), 5 frees "
            "(500 B); 15 blocks, 1.5 KiB in use") in sections[0].splitlines()
    assert sections[0].splitlines()[1].startswith("  sampled, requested sizes: allocated ")
    assert sections[1].splitlines()[1].startswith("  sampled: allocated ")
    assert sections[1].startswith("pid 7 (app), heap pool, 2 dumps")
    assert ("  exact since profiling began: 6 allocations (1.5 KiB), 1 frees (256 B); "
            "5 blocks, 1.2 KiB in use") in sections[1].splitlines()


def test_a_custom_heap_without_libc_malloc_is_converted_alone(tmp_path):
    result = _convert(tmp_path, ["pool"])
    assert sorted(p.name for p in result.pprof_paths) == ["heap_dump.0.7.pool.pb.gz",
                                                          "heap_dump.1.7.pool.pb.gz"]
    last = _profile(tmp_path / "out" / "heap_dump.1.7.pool.pb.gz")
    assert _sampled(last) == (1024, 768)
    assert ("exact since profiling began: 6 allocations (1536 bytes), 1 frees (256 bytes)"
            in _comments(last))
    (process,) = result.processes
    assert (process.heap_name, process.dumps, process.totals) == ("pool", 2,
                                                                  HeapTotals(6, 1536, 1, 256))
    assert result.summary_text.startswith("pid 7 (app), heap pool, 2 dumps")
    assert "libc.malloc" not in result.summary_text


def test_the_process_figures_print_once_in_libc_mallocs_section(tmp_path):
    # mallinfo and RSS are the process's: beside a custom heap they would read as its own.
    result = _convert(tmp_path, ["arena", "pool", "libc.malloc"])
    sections = result.summary_text.split("\n\n")
    assert [section.split(", ")[1] for section in sections] == [
        "heap libc.malloc", "heap arena", "heap pool"]
    for line in ("  the allocator (mallinfo) ", "  the process: RSS "):
        assert result.summary_text.count(line) == 1 and line in sections[0], line
