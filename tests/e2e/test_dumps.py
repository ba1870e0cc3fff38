"""What a dump holds, through the emulator device: with --dump-at-max, what was in use when the
process's sampled heap was largest (heapprofd's dump_at_max), in the trace (self_max, as Perfetto's
trace processor reads it), the pprof files (in-use values) and the summary; and beside every dump
what the kernel says the process holds (RSS, swap), as Perfetto's process_stats writes it."""
import collections
import gzip

from droidheap.pprof import Profile
from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import parse_trace
from tests.e2e.test_profile import single_process
from tests.e2e.trace_check import read_dumps
from tests.trace_processor import LoadedTrace

PEAK = {"peak_phase": (64 * 10000, 64), "after_peak": (0, 0)}


def in_use_by_function(profile):
    """{leaf function named peak_* or after_*: (inuse_space, inuse_objects)} of a pprof file."""
    strings = profile.string_table
    types = [strings[t.type] for t in profile.sample_type]
    functions = {f.id: strings[f.name] for f in profile.function}
    names = {loc.id: [functions[line.function_id] for line in loc.line] for loc in profile.location}
    result = collections.defaultdict(lambda: (0, 0))
    for sample in profile.sample:
        values = dict(zip(types, sample.value))
        assert values["alloc_space"] == 0 and values["alloc_objects"] == 0
        site = next((n for loc in sample.location_id for n in names[loc]
                     if n in PEAK), None)
        if site:
            space, objects = result[site]
            result[site] = (space + values["inuse_space"], objects + values["inuse_objects"])
    return result


def test_dump_at_max_holds_the_peak(cli, programs, tmp_path):
    program = programs("peak")
    out = tmp_path / "out"
    result = cli.run("--local", "--dump-at-max", "-i", "1", "-o", out, "--", program)
    assert result.returncode == 0, result.stderr
    assert "in use at the peak of the sampled heap" in result.stderr, result.stderr
    # The trace: heapprofd's dump_at_max fields only.
    samples = [s for _, s in single_process(read_dumps(out / "raw-trace"))[-1]]
    assert samples and all(s.self_allocated == 0 and s.alloc_count == 0 for s in samples)
    assert sum(s.self_max for s in samples) >= PEAK["peak_phase"][0]
    # The pprof file of the last dump.
    last = max(out.glob("heap_dump.*.pb.gz"), key=lambda f: int(f.name.split(".")[1]))
    per_function = in_use_by_function(Profile.FromString(gzip.decompress(last.read_bytes())))
    assert per_function["peak_phase"] == PEAK["peak_phase"], dict(per_function)
    assert per_function["after_peak"] == PEAK["after_peak"], dict(per_function)
    # Perfetto's trace processor books the peak's bytes, and nothing is lost in the import.
    with LoadedTrace(out / "symbolized-trace") as trace:
        assert trace.problems() == []
        sites = single_process(trace.totals_by_site("peak_"))
        assert sites["peak_phase"].allocated == PEAK["peak_phase"][0], sites


def test_each_dump_carries_the_processs_memory(cli, alloc_program, tmp_path):
    out = tmp_path / "out"
    result = cli.run("--local", "-i", "1", "-c", "200", "-o", out, "--", alloc_program,
                     "--linger", "600")
    assert result.returncode == 0, result.stderr
    assert "the process as it exited: RSS " in result.stderr, result.stderr
    dumps = rebuild_dumps(parse_trace((out / "raw-trace").read_bytes()).packets).dumps
    (pid, process_dumps), = dumps.items()
    # The periodic dumps read it while the process lives; its exit dump, in its exit path.
    assert all(d.memory and d.memory.rss_kb > 0 for d in process_dumps), process_dumps
    assert process_dumps[-1].ending == "process exited", process_dumps[-1]
    # As Perfetto's process_stats data source writes it: the process's mem.rss counter.
    with LoadedTrace(out / "symbolized-trace") as trace:
        assert trace.problems() == []
        rss = trace.rows("select c.value from counter c join process_counter_track t "
                         "on c.track_id = t.id join process p using (upid) "
                         f"where t.name = 'mem.rss' and p.pid = {pid}")
        assert len(rss) == len(process_dumps) and all(r["value"] > 0 for r in rss), rss
