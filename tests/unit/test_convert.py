"""convert_trace end to end on synthetic traces whose frames are real return addresses of a
program compiled here: symbolized trace, pprof files, summary, and bad input."""
import gc
import pathlib
import shutil

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from droidheap import convert
from droidheap.convert import SYMBOLIZED_TRACE, convert_trace
from droidheap.errors import DroidheapError
from droidheap.symbolizer import ModuleSymbols, SourceLine
from droidheap.trace.symbolized import module_symbols_packet
from fixtures_trace import LIBC, FakeMapping, TraceBuilder, two_process_trace


def _trace(program, device_path=None) -> TraceBuilder:
    prog = FakeMapping(device_path or str(program.path), bytes.fromhex(program.build_id),
                       start=0x5555_0000_0000, end=0x5555_0000_4000)
    ret = program.return_addresses
    b = TraceBuilder().clock_snapshot().process(321, "alloc_prog", "1")
    deep = b.callstack([(LIBC, 0x2a000), (prog, ret["middle"]), (prog, ret["leaf_alloc"]),
                        (prog, ret["malloc"])])
    shallow = b.callstack([(LIBC, 0x2a000), (prog, ret["middle"])])
    b.dump({321: [(deep, 65536, 16384, 16, 4), (shallow, 4096, 4096, 1, 1)]})
    b.dump({321: [(deep, 131072, 16384, 32, 4), (shallow, 8192, 4096, 2, 1)]})
    return b


def _convert(tmp_path, data: bytes, **kwargs):
    """As the local device's session converts the trace it made: its paths are this machine's
    (test_foreign_traces.py)."""
    raw = tmp_path / "raw-trace"
    raw.write_bytes(data)
    return convert_trace(raw, tmp_path / "out", **{"made_locally": True, **kwargs})


def _build_id_bytes(value) -> bytes:
    # Python protobuf hands a non-UTF-8 `string` back as bytes, a UTF-8 one as str.
    return value if isinstance(value, bytes) else value.encode()


def test_writes_symbolized_trace_and_one_pprof_per_dump(program, tmp_path):
    result = _convert(tmp_path, _trace(program).to_bytes())
    assert result.symbolized_trace == tmp_path / "out" / SYMBOLIZED_TRACE
    assert [p.name for p in result.pprof_paths] == ["heap_dump.0.321.libc.malloc.pb.gz",
                                                    "heap_dump.1.321.libc.malloc.pb.gz"]
    assert all(p.is_file() for p in result.pprof_paths)


def test_summary_names_the_top_call_site_with_file_and_line(program, tmp_path):
    result = _convert(tmp_path, _trace(program).to_bytes())
    (process,) = result.processes
    assert (process.pid, process.cmdline, process.dumps) == (321, "alloc_prog 1", 2)
    assert (process.allocated, process.in_use) == (139264, 118784)
    top = process.top_sites[0]
    assert (top.site.function, top.site.line) == ("leaf_alloc", program.line_of("LEAF_MALLOC"))
    assert f"leaf_alloc (alloc_prog.c:{program.line_of('LEAF_MALLOC')})" in result.summary_text
    # The shallow stack's leaf is main's call to middle.
    assert process.top_sites[1].site.function == "main"
    assert "pid 321 (alloc_prog 1)" in result.summary_text


def test_symbolized_trace_is_raw_trace_plus_module_symbols(program, tmp_path):
    raw = _trace(program).to_bytes()
    result = _convert(tmp_path, raw)
    data = result.symbolized_trace.read_bytes()
    assert data.startswith(raw)
    packets = pb.Trace.FromString(data).packet
    symbols = [p.module_symbols for p in packets if p.HasField("module_symbols")]
    (module,) = symbols  # libc.so is not on this machine: nothing to append for it
    # The path as the trace processor joins the mapping's components, the build id raw.
    assert module.path == str(program.path)
    assert _build_id_bytes(module.build_id) == bytes.fromhex(program.build_id)
    by_address = {a.address: a.lines[0] for a in module.address_symbols}
    leaf = by_address[program.return_addresses["malloc"]]
    assert (leaf.function_name, leaf.line_number) == ("leaf_alloc", program.line_of("LEAF_MALLOC"))
    assert leaf.source_file_name == str(program.source)


def test_a_process_the_trace_leaves_unnamed_is_named_by_the_caller(program, tmp_path):
    """A program started for the platform's heapprofd: its command line comes from the caller,
    into the summary and a process_tree packet of the symbolized trace; a name the trace has
    wins."""
    builder = TraceBuilder()
    stack = builder.callstack([(LIBC, 0x2a000)])
    builder.dump({321: [(stack, 4096, 0, 1, 0)], 400: [(stack, 64, 0, 1, 0)]})
    builder.process(400, "named", "by-the-trace")
    result = _convert(tmp_path, builder.to_bytes(),
                      process_argvs={321: ["/data/local/tmp/prog", "-x"], 400: ["other"]})
    assert {p.pid: p.cmdline for p in result.processes} == {321: "/data/local/tmp/prog -x",
                                                             400: "named by-the-trace"}
    packets = pb.Trace.FromString(result.symbolized_trace.read_bytes()).packet
    trees = [list(p.process_tree.processes) for p in packets if p.HasField("process_tree")]
    assert [(proc.pid, list(proc.cmdline)) for proc in trees[-1]] == \
        [(321, ["/data/local/tmp/prog", "-x"])]


def test_a_process_nothing_names_is_named_as_profiled(program, tmp_path):
    """A session for one exact name (the platform's heapprofd profiles only processes of that
    name): a process the caller never saw run is named by it; what the trace or the caller says
    wins."""
    builder = TraceBuilder()
    stack = builder.callstack([(LIBC, 0x2a000)])
    builder.dump({321: [(stack, 4096, 0, 1, 0)], 322: [(stack, 64, 0, 1, 0)],
                  400: [(stack, 64, 0, 1, 0)]})
    builder.process(400, "named", "by-the-trace")
    result = _convert(tmp_path, builder.to_bytes(), process_argvs={321: ["/data/prog", "-x"]},
                      profiled_as=["prog"])
    assert {p.pid: p.cmdline for p in result.processes} == {
        321: "/data/prog -x", 322: "prog", 400: "named by-the-trace"}


def test_module_symbols_build_id_round_trips_as_raw_bytes():
    build_id = "ff00fe80" + "c3" * 16  # not UTF-8
    module = ModuleSymbols("/system/lib64/libfoo.so", build_id,
                           lines={0x10: (SourceLine("f", "foo.c", 3),)})
    trace = pb.Trace.FromString(module_symbols_packet(module))
    (packet,) = trace.packet
    assert packet.module_symbols.path == "/system/lib64/libfoo.so"
    assert _build_id_bytes(packet.module_symbols.build_id) == bytes.fromhex(build_id)
    (address,) = packet.module_symbols.address_symbols
    assert (address.address, address.lines[0].function_name, address.lines[0].line_number) == (
        0x10, "f", 3)


def test_search_dirs_find_the_device_path(program, tmp_path):
    root = tmp_path / "symbols"
    (root / "data" / "app").mkdir(parents=True)
    shutil.copy(program.path, root / "data" / "app" / "alloc_prog")
    data = _trace(program, device_path="/data/app/alloc_prog").to_bytes()
    result = _convert(tmp_path, data, search_dirs=[root])
    assert result.processes[0].top_sites[0].site.function == "leaf_alloc"


def test_unsymbolized_frames_get_module_offset_names_and_a_warning(program, tmp_path):
    result = _convert(tmp_path, _trace(program, device_path="/vendor/lib64/libgone.so").to_bytes())
    names = {s.site.function for s in result.processes[0].top_sites}
    assert names == {f"libgone.so+{program.return_addresses[c]:#x}" for c in ("malloc", "middle")}
    assert any("libgone.so not symbolized: no file found" in w and "--symbols DIR" in w
               for w in result.warnings)
    assert "warning: /vendor/lib64/libgone.so not symbolized" in result.summary_text


def test_a_symbolized_trace_keeps_its_symbols_for_files_not_found_here(program, tmp_path):
    """Converted again (droidheap symbolize) where the library is missing, a trace keeps the
    symbols appended to it earlier, once per mapping."""
    gone = "/vendor/lib64/libgone.so"
    earlier = ModuleSymbols(gone, program.build_id, lines={
        program.return_addresses["malloc"]: (SourceLine("leaf_alloc", "leaf.c", 6),)})
    data = _trace(program, device_path=gone).to_bytes() + module_symbols_packet(earlier)
    result = _convert(tmp_path, data)
    assert result.processes[0].top_sites[0].site.function == "leaf_alloc"
    assert not any("libgone.so not symbolized" in w for w in result.warnings)
    again = pb.Trace.FromString(result.symbolized_trace.read_bytes())
    assert sum(p.HasField("module_symbols") for p in again.packet) == 1


def test_truncated_trace_keeps_earlier_dumps_and_symbolized_trace_stays_readable(program,
                                                                                 tmp_path):
    data = _trace(program).to_bytes()
    result = _convert(tmp_path, data[:-9])
    assert result.processes[0].dumps == 1
    assert any("truncated" in w for w in result.warnings)
    packets = pb.Trace.FromString(result.symbolized_trace.read_bytes()).packet
    assert packets[-1].HasField("module_symbols")


def test_trace_without_dumps_converts_to_an_empty_summary(tmp_path):
    result = _convert(tmp_path, TraceBuilder().clock_snapshot().to_bytes())
    assert result.pprof_files == [] and result.processes == []
    assert "No heap dumps" in result.summary_text


@pytest.mark.parametrize("data", [b"", b"\xff" * 16, b"\x0a\x40" + b"x" * 10],
                         ids=["empty", "garbage", "torn-first-packet"])
def test_unreadable_trace_raises_droidheap_error(tmp_path, data):
    with pytest.raises(DroidheapError) as error:
        _convert(tmp_path, data)
    assert "raw-trace" in str(error.value)


def test_missing_trace_raises_droidheap_error(tmp_path):
    with pytest.raises(DroidheapError, match="cannot read the trace"):
        convert_trace(tmp_path / "nope", tmp_path / "out")


def _symbolize_output(tmp_path, data: bytes, tty: bool) -> str:
    """What `droidheap symbolize` prints (its own lines: on stderr) with stderr on a terminal (a
    pty) or on a pipe."""
    import os
    import pty
    import subprocess
    import sys
    raw = tmp_path / "raw-trace"
    raw.write_bytes(data)
    command = [sys.executable, "-m", "droidheap.cli", "symbolize", str(raw)]
    if not tty:
        return subprocess.run(command, capture_output=True, text=True, timeout=60).stderr
    leader, follower = pty.openpty()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=60)
    os.close(leader)
    return b"".join(chunks).decode(errors="replace")


def test_progress_bars_are_drawn_on_a_terminal_only(program, tmp_path):
    data = _trace(program).to_bytes()
    on_terminal = _symbolize_output(tmp_path, data, tty=True)
    assert "symbolizing" in on_terminal and "writing pprof files" in on_terminal, on_terminal
    assert "Wrote profiles to" in on_terminal
    piped = _symbolize_output(tmp_path, data, tty=False)
    assert "symbolizing" not in piped and "writing pprof" not in piped and "\r" not in piped
    assert "Wrote profiles to" in piped


def test_the_outputs_are_listed_last_report_html_first(program, tmp_path):
    printed = _symbolize_output(tmp_path, _trace(program).to_bytes(), tty=False)
    written = printed.splitlines()
    start = next(i for i, line in enumerate(written) if line.startswith("Wrote profiles to"))
    report, trace, pprof = written[start + 1:]
    assert report.strip().startswith(str(tmp_path)) and "report.html" in report, printed
    assert "symbolized-trace" in trace and "ui.perfetto.dev" in trace, printed
    # The last dump of the first process, a file that exists.
    command = pprof.split("go tool pprof -top ")[1]
    assert pathlib.Path(command).is_file() and ".pb.gz" in command, printed


def test_a_partly_symbolized_mapping_is_named_once_with_its_count(program, tmp_path):
    prog = FakeMapping(str(program.path), bytes.fromhex(program.build_id),
                       start=0x5555_0000_0000, end=0x5555_0000_4000)
    b = TraceBuilder().clock_snapshot().process(321, "alloc_prog")
    # 0x8 lies in the ELF header: no function holds it, as a stripped file's static functions.
    stack = b.callstack([(prog, 0x8), (prog, program.return_addresses["malloc"])])
    b.dump({321: [(stack, 4096, 4096, 1, 1)]})
    result = _convert(tmp_path, b.to_bytes())
    (warning,) = [w for w in result.warnings if "partly symbolized" in w]
    assert warning.startswith(f"{program.path} partly symbolized: 1 of 2 addresses")


def test_a_conversion_leaves_the_collector_as_it_found_it(tmp_path, monkeypatch):
    # Symbolization's collection leaves the dumps' objects out (frozen); they are thawed after,
    # and when symbolization fails too.
    raw = tmp_path / "raw-trace"
    raw.write_bytes(two_process_trace().to_bytes())
    convert_trace(raw, tmp_path / "out")
    assert gc.get_freeze_count() == 0 and gc.isenabled()

    def fails(*_):
        raise DroidheapError("symbolization failed")
    monkeypatch.setattr(convert, "symbolize_dumps", fails)
    with pytest.raises(DroidheapError, match="symbolization failed"):
        convert_trace(raw, tmp_path / "again")
    assert gc.get_freeze_count() == 0 and gc.isenabled()
