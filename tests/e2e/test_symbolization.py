"""Symbolization end to end: a C++ program whose allocations pass through inlined functions
(tests/programs/inline_sites.cc, -O2) profiled on the emulator device; its inline frames, with
file:line, reach the pprof, the symbolized trace (as Perfetto's trace processor reads it) and the
summary."""
import gzip
import pathlib

from droidheap.pprof import Profile
from tests.trace_processor import LoadedTrace

SOURCE = pathlib.Path(__file__).parents[1] / "programs" / "inline_sites.cc"


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(SOURCE.read_text().splitlines(), start=1)
                if marker in text)


def test_inline_frames_reach_the_pprof_the_trace_and_the_summary(cli, programs, tmp_path):
    program = programs("inline_sites")
    out = tmp_path / "out"
    result = cli.run("--local", "-i", "1", "-o", out, "--", program, "50")
    assert result.returncode == 0, result.stderr
    chain = [("inner_alloc", _line("INNER_MALLOC")), ("middle_alloc", _line("MIDDLE_CALL")),
             ("outer_alloc(int)", _line("OUTER_CALL"))]
    # The summary's call site is the innermost function: the one that called malloc.
    assert f"inner_alloc (inline_sites.cc:{chain[0][1]})" in result.stdout, result.stdout

    (path,) = out.glob("heap_dump.*.pb.gz")
    profile = Profile.FromString(gzip.decompress(path.read_bytes()))
    strings = profile.string_table
    names = {f.id: strings[f.name] for f in profile.function}
    locations = [[(names[line.function_id], line.line) for line in loc.line]
                 for loc in profile.location]
    assert chain in locations, locations
    assert any(m.has_inline_frames for m in profile.mapping if strings[m.filename] ==
               str(program))

    with LoadedTrace(out / "symbolized-trace") as trace:
        assert trace.problems() == []
        rows = trace.rows(
            "select s.name, s.line_number from stack_profile_symbol s where s.symbol_set_id in "
            "(select symbol_set_id from stack_profile_symbol where name = 'inner_alloc') "
            "order by s.id")
    assert [(r["name"], r["line_number"]) for r in rows] == chain
