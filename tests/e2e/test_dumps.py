"""What a dump holds, through the emulator device: with --dump-at-max, what was in use when the
process's sampled heap was largest (heapprofd's dump_at_max), in the trace (self_max, as Perfetto's
trace processor reads it), the pprof files (in-use values) and the summary."""
import collections
import gzip

from droidheap.pprof import Profile
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
    assert "in use at the peak of the sampled heap" in result.stdout, result.stdout
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
