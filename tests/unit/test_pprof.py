"""The pprof writer: profile.proto layout, values, and what pprof's own tools make of the files."""
import gzip
import os
import pathlib
import shutil
import subprocess

import pytest

from droidheap.pprof import Profile, PprofWriter, pprof_file_name
from droidheap.symbolizer import ModuleSymbols, SourceLine, SymbolTable
from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import parse_trace
from fixtures_trace import (APP, LIBC, TraceBuilder, heap_counters, mallinfo_counters,
                            two_process_trace)

TOOLS = pathlib.Path(__file__).resolve().parent.parent / "tools"


def _dumps():
    return rebuild_dumps(parse_trace(two_process_trace().to_bytes()).packets)


def _symbols() -> SymbolTable:
    app = ModuleSymbols(APP.path, APP.build_id.hex(), pathlib.Path("/host/app"), {
        0x2000: (SourceLine("main", "/src/app.c", 40),),
        0x3000: (SourceLine("make_buffers", "/src/app.c", 12),),
        0x4000: (SourceLine("make_cache", "/src/cache.c", 7),),
        0x6000: (SourceLine("make_cache", "/src/cache.c", 9),),
    })
    return SymbolTable({(APP.path, APP.build_id.hex()): app})


def _strings(p, ids):
    return [p.string_table[i] for i in ids]


def _go_env(tmp: pathlib.Path):
    return dict(os.environ, GO111MODULE="off", GOPATH="/usr/share/gocode",
                GOCACHE=str(tmp / "gocache"), HOME=str(tmp))


@pytest.fixture(scope="module")
def go_validator(tmp_path_factory):
    if shutil.which("go") is None:
        pytest.skip("go is not installed (Debian: golang-go golang-github-google-pprof-dev)")
    tmp = tmp_path_factory.mktemp("go")
    binary = tmp / "validate_pprof"
    subprocess.run(["go", "build", "-o", str(binary), str(TOOLS / "validate_pprof.go")],
                   env=_go_env(tmp), check=True, capture_output=True, cwd=tmp)
    return binary


@pytest.fixture
def pprof_files(tmp_path):
    dumps = _dumps()
    writer = PprofWriter(_symbols())
    return [writer.write(d, tmp_path, dumps.cmdlines.get(pid, ""), 123)
            for pid in dumps.dumps for d in dumps.dumps[pid]]


def test_sample_types_in_go_heap_order_with_inuse_space_default():
    dump = _dumps().dumps[100][0]
    p = PprofWriter(_symbols()).profile(dump)
    assert p.string_table[0] == ""
    assert [(p.string_table[t.type], p.string_table[t.unit]) for t in p.sample_type] == [
        ("alloc_objects", "count"), ("alloc_space", "bytes"),
        ("inuse_objects", "count"), ("inuse_space", "bytes")]
    assert p.string_table[p.default_sample_type] == "inuse_space"
    assert _strings(p, [p.period_type.type, p.period_type.unit]) == ["space", "bytes"]
    assert p.period == 4096


def test_values_are_allocated_and_allocated_minus_freed():
    p = PprofWriter(_symbols()).profile(_dumps().dumps[100][0])
    assert sorted(list(s.value) for s in p.sample) == [[2, 8192, 1, 4096], [10, 40960, 10, 40960]]


def test_locations_are_leaf_first_with_symbolized_lines():
    p = PprofWriter(_symbols()).profile(_dumps().dumps[100][0])
    locations = {loc.id: loc for loc in p.location}
    functions = {f.id: f for f in p.function}
    stacks = []
    for sample in p.sample:
        names = []
        for location_id in sample.location_id:
            (line,) = locations[location_id].line
            f = functions[line.function_id]
            names.append((p.string_table[f.name], p.string_table[f.filename], line.line))
        stacks.append(names)
    assert [("make_buffers", "/src/app.c", 12), ("main", "/src/app.c", 40),
            ("libc.so+0x1000", "", 0)] in stacks


def test_ids_are_non_zero_and_mapping_flags_follow_symbolization():
    p = PprofWriter(_symbols()).profile(_dumps().dumps[100][0])
    assert all(x.id for x in [*p.mapping, *p.location, *p.function])
    by_name = {p.string_table[m.filename]: m for m in p.mapping}
    app, libc = by_name[APP.path], by_name[LIBC.path]
    assert app.has_functions and app.has_filenames and app.has_line_numbers
    assert not (libc.has_functions or libc.has_filenames or libc.has_line_numbers)
    assert p.string_table[app.build_id] == APP.build_id.hex()
    assert (app.memory_start, app.memory_limit) == (APP.start, APP.end)
    leaf = next(loc for loc in p.location if loc.mapping_id == app.id)
    assert APP.start <= leaf.address < APP.end


def test_pseudo_frames_have_no_mapping_and_are_named_from_their_path():
    p = PprofWriter(_symbols()).profile(_dumps().dumps[200][0])
    pseudo = [loc for loc in p.location if loc.mapping_id == 0]
    (loc,) = pseudo
    names = [p.string_table[f.name] for f in p.function if f.id == loc.line[0].function_id]
    assert names == ["[droidheap: unwind error]"]


def test_comment_holds_the_cmdline_and_time_is_set(pprof_files):
    path = next(f.path for f in pprof_files if f.pid == 100 and f.dump_index == 1)
    p = Profile.FromString(gzip.decompress(path.read_bytes()))
    comments = _strings(p, p.comment)
    assert comments[0] == "/data/local/tmp/app --fast"
    assert "flags: disconnected" in comments
    assert p.time_nanos == 123 and p.duration_nanos == 2 * 10**9


def test_comment_holds_the_exact_totals_and_mallinfo_when_known():
    b = TraceBuilder()
    stack = b.callstack([(APP, 0x2000)])
    b.counters(7, {**heap_counters(10, 1000, 4, 400), **mallinfo_counters(700, 300, 4096)})
    b.dump({7: [(stack, 64, 0, 1, 0)]})
    b.dump({7: [(stack, 128, 0, 2, 0)]})  # none this time
    known, unknown = rebuild_dumps(parse_trace(b.to_bytes()).packets).dumps[7]
    p = PprofWriter(_symbols()).profile(known)
    comments = _strings(p, p.comment)
    assert ("exact since profiling began, usable sizes: 10 allocations (1000 bytes), 4 frees "
            "(400 bytes)" in comments)
    assert "mallinfo: 700 bytes in use, 300 free, 4096 from the system" in comments
    p = PprofWriter(_symbols()).profile(unknown)
    assert not [c for c in _strings(p, p.comment) if c.startswith(("exact", "mallinfo"))]


def test_one_file_per_process_and_dump(pprof_files):
    names = sorted(f.path.name for f in pprof_files)
    assert names == ["heap_dump.0.100.libc.malloc.pb.gz", "heap_dump.0.200.libc.malloc.pb.gz",
                     "heap_dump.1.100.libc.malloc.pb.gz", "heap_dump.1.200.libc.malloc.pb.gz"]


def _as_read(p):
    """A profile's samples as (each location's mapping, address and functions, leaf first;
    values), sorted: what its ids say, whichever writer numbered them."""
    mappings = {m.id: p.string_table[m.filename] for m in p.mapping}
    functions = {f.id: p.string_table[f.name] for f in p.function}
    locations = {loc.id: (mappings.get(loc.mapping_id, ""), loc.address,
                          tuple(functions[line.function_id] for line in loc.line))
                 for loc in p.location}
    return sorted((tuple(map(locations.__getitem__, s.location_id)), tuple(s.value))
                  for s in p.sample)


def test_each_dump_is_written_as_a_writer_that_saw_no_other_writes_it():
    # The writer compares a dump with the one before, place by place: samples that stayed, changed,
    # came after, moved or left are each written as they are.
    b = TraceBuilder()
    s1, s2, s3, s4 = (b.callstack([(LIBC, 0x1000), (APP, 0x2000), (APP, pc)])
                      for pc in (0x3000, 0x4000, 0x6000, 0x7000))
    b.dump({100: [(s1, 64, 0, 1, 0), (s2, 128, 0, 2, 0), (s3, 256, 0, 4, 0)]})
    b.dump({100: [(s1, 64, 0, 1, 0), (s2, 192, 64, 3, 1), (s3, 256, 0, 4, 0),
                  (s4, 32, 0, 1, 0)]})
    b.dump({100: [(s3, 256, 0, 4, 0), (s1, 64, 0, 1, 0), (s4, 32, 0, 1, 0)]})
    b.dump({100: [(s3, 512, 0, 8, 0), (s1, 64, 0, 1, 0)]})
    dumps = rebuild_dumps(parse_trace(b.to_bytes()).packets).dumps[100]
    writer = PprofWriter(_symbols())
    for dump in dumps:
        assert _as_read(writer.profile(dump)) == _as_read(PprofWriter(_symbols()).profile(dump))
    assert [len(writer.profile(d).location) for d in dumps] == [5, 6, 5, 4]


def test_heap_name_is_made_safe_for_a_file_name():
    dump = _dumps().dumps[100][0]
    dump.heap_name = "my heap/v2"
    assert pprof_file_name(dump) == "heap_dump.0.100.my_heap_v2.pb.gz"


def test_files_pass_pprof_parse_and_check_valid(pprof_files, go_validator):
    result = subprocess.run([str(go_validator), *[str(f.path) for f in pprof_files]],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("valid") == 4


def _pprof_top(path: pathlib.Path, tmp: pathlib.Path, *flags: str) -> str:
    result = subprocess.run(["go", "tool", "pprof", "-top", *flags, str(path)],
                            capture_output=True, text=True, env=_go_env(tmp), timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _flat(top: str) -> dict:
    """{function: flat column} from `pprof -top` rows."""
    rows = {}
    for line in top.splitlines():
        parts = line.split()
        if len(parts) == 6 and parts[1].endswith("%"):
            rows[parts[5]] = parts[0]
    return rows


def test_go_tool_pprof_top_names_the_functions(pprof_files, go_validator, tmp_path):
    path = next(f.path for f in pprof_files if f.pid == 100 and f.dump_index == 1)
    inuse = _pprof_top(path, tmp_path)
    assert "Type: inuse_space" in inuse
    # In use at dump 1: make_cache 77824 + 4096 B (two lines, one function); make_buffers 0.
    assert _flat(inuse)["make_cache"] == "80kB"
    assert "make_buffers" not in _flat(inuse)
    alloc = _pprof_top(path, tmp_path, "-sample_index=alloc_space")
    assert "Type: alloc_space" in alloc
    assert _flat(alloc)["make_buffers"] == "16kB"
    assert _flat(alloc)["make_cache"] == "84kB"


def test_go_tool_pprof_base_and_droidheap_diff_agree(pprof_files, go_validator, tmp_path):
    """docs/outputs.md says `go tool pprof -base` reads our files for growth: as `droidheap diff`."""
    from droidheap.results.diff import site_growth
    from droidheap.results.load import load_results
    first, second = (next(f.path for f in pprof_files if f.pid == 100 and f.dump_index == i)
                     for i in (0, 1))
    growth = _flat(_pprof_top(second, tmp_path, f"-base={first}"))
    # In use: make_cache 40960 -> 77824 + 4096, make_buffers 4096 -> 0.
    assert (growth["make_cache"], growth["make_buffers"]) == ("40kB", "-4kB")
    ours = {str(g.site): g.in_use_delta for g in site_growth(
        load_results(first).profiles, load_results(second).profiles)}
    # pprof -top sums a function's lines; droidheap's sites are lines.
    assert ours == {"make_cache (cache.c:7)": 77824 - 40960, "make_cache (cache.c:9)": 4096,
                    "make_buffers (app.c:12)": -4096}


def test_the_programs_own_mapping_comes_first_as_pprof_takes_it_for_the_main_binary():
    b = TraceBuilder().process(7, f"{APP.path} --fast")
    b.dump({7: [(b.callstack([(LIBC, 0x10), (APP, 0x2000)]), 64, 0, 1, 0)]})
    (dump,) = rebuild_dumps(parse_trace(b.to_bytes()).packets).dumps[7]
    p = PprofWriter(_symbols()).profile(dump, f"{APP.path} --fast")
    assert [p.string_table[m.filename] for m in p.mapping] == [APP.path, LIBC.path]
