"""Symbolization end to end: a C++ program whose allocations pass through inlined functions
(tests/programs/inline_sites.cc, -O2) profiled on the emulator device; its inline frames, with
file:line, reach the pprof, the symbolized trace (as Perfetto's trace processor reads it), the
summary and report.html."""
import gzip
import pathlib
import subprocess

from droidheap.pprof import Profile
from droidheap.trace.reader import parse_trace
from tests.chromium import Page, dump_dom
from tests.e2e.test_profile import STRIP
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
    assert f"inner_alloc (inline_sites.cc:{chain[0][1]})" in result.stderr, result.stderr

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

    # The page draws each inline frame as a frame of its own, callers above.
    dom, console = dump_dom(out / "report.html")
    assert console == []
    tops = {}
    for box in Page(dom).boxes:
        tops.setdefault(box["text"], set()).add(box["top"])
    outer, middle, inner = (f"{name} (inline_sites.cc:{line})" for name, line in reversed(chain))
    # Some outer_alloc frame has middle_alloc right below it, and inner_alloc below that.
    assert any(top + 18 in tops.get(middle, ()) and top + 36 in tops.get(inner, ())
               for top in tops.get(outer, ())), tops


def test_symbolize_converts_a_trace_again_with_the_symbols_given_now(cli, abi, alloc_program,
                                                                       tmp_path):
    """A stripped program's profile, then `symbolize` with its unstripped twin: the frames get
    names, in a new directory and in place, where the re-written trace holds one set of symbols
    per mapping (Perfetto's trace processor reads it without a problem)."""
    stripped = tmp_path / "bin" / alloc_program.name
    stripped.parent.mkdir()
    subprocess.run([STRIP[abi], "-o", str(stripped), str(alloc_program)], check=True)
    out = tmp_path / "out"
    plain = cli.run("--local", "-i", "1", "-o", out, "--", stripped)
    assert plain.returncode == 0, plain.stderr
    assert "site_leak_malloc" not in plain.stderr

    again = cli.run("symbolize", out / "raw-trace", "--symbols", alloc_program.parent,
                    "-o", tmp_path / "again")
    assert again.returncode == 0, again.stderr
    assert "site_leak_malloc (alloc_sites.c:" in again.stderr, again.stderr
    assert list((tmp_path / "again").glob("heap_dump.*.pb.gz"))

    for _ in range(2):  # in place, twice: the second run replaces the first one's symbols
        in_place = cli.run("symbolize", out / "symbolized-trace", "--symbols",
                           alloc_program.parent)
        assert in_place.returncode == 0, in_place.stderr
    with LoadedTrace(out / "symbolized-trace") as trace:
        assert trace.problems() == []
        rows = trace.rows("select count(*) as n from stack_profile_symbol "
                          "where name = 'site_leak_malloc'")
    assert rows[0]["n"] >= 1
    rewritten = parse_trace((out / "symbolized-trace").read_bytes()).packets
    paths = [p.module_symbols.path for p in rewritten if p.HasField("module_symbols")]
    assert len(paths) == len(set(paths)), paths


def test_symbolize_names_a_missing_or_unreadable_trace_in_one_line(cli, tmp_path):
    missing = cli.run("symbolize", tmp_path / "nothing")
    junk = tmp_path / "junk"
    junk.write_bytes(b"\xff" * 64)
    garbage = cli.run("symbolize", junk)
    for result in (missing, garbage):
        assert result.returncode != 0
        assert result.stderr.startswith("droidheap: ") and len(result.stderr.splitlines()) == 1, \
            result.stderr
