"""Names a trace, a pprof file or a phone chose reach the user's terminal as text: their control
characters (a title-setting `ESC ] 0 ; ... BEL`, a bidirectional override) are shown escaped,
never obeyed -- in reports, summaries and error lines alike."""
from droidheap.symbolizer import ModuleSymbols, SourceLine
from droidheap.terminal import printable
from droidheap.trace.symbolized import module_symbols_packet
from fixtures_trace import APP, FakeMapping, TraceBuilder
from test_cli_errors import run_cli
from test_results import write_pprof_dir

SET_TITLE = "\x1b]0;owned\x07"
RIGHT_TO_LEFT = "\u202e"
RAW = ("\x1b", "\x07", "\x9b", RIGHT_TO_LEFT)


def assert_escaped(text: str) -> None:
    assert not any(c in text for c in RAW), repr(text)
    assert "\\x1b]0;owned\\x07" in text, text


def test_printable_escapes_controls_and_keeps_text():
    assert printable(f"a\tb\n{SET_TITLE}é{RIGHT_TO_LEFT}\x9b\x7f") == \
        "a\tb\n\\x1b]0;owned\\x07é\\u202e\\x9b\\x7f"


def test_report_of_a_trace_escapes_symbol_process_and_library_names(tmp_path):
    hostile_library = FakeMapping(f"/data/app/{SET_TITLE}lib.so", start=0x6000_0000,
                                  end=0x6001_0000)
    b = TraceBuilder().process(7, f"app{SET_TITLE}{RIGHT_TO_LEFT}")
    b.dump({7: [(b.callstack([(APP, 0x10), (hostile_library, 0x20)]), 8192, 0, 2, 0)]})
    symbols = ModuleSymbols(APP.path, APP.build_id.hex(),
                            lines={0x10: (SourceLine(f"main{SET_TITLE}", "app.c", 3),)})
    trace = tmp_path / "trace"
    trace.write_bytes(b.to_bytes() + module_symbols_packet(symbols))
    result = run_cli(["report", str(trace)], tmp_path)
    assert result.returncode == 0, result.stderr
    assert_escaped(result.stdout)
    assert "main\\x1b]0;owned\\x07" in result.stdout and "app\\x1b" in result.stdout


def test_report_of_a_pprof_escapes_function_and_file_names(tmp_path):
    out = write_pprof_dir(tmp_path, function=f"f{SET_TITLE}", file=f"app{RIGHT_TO_LEFT}.c")
    result = run_cli(["report", str(out)], tmp_path)
    assert result.returncode == 0, result.stderr
    assert_escaped(result.stdout)
    assert "app\\u202e.c" in result.stdout


def test_error_lines_escape_what_they_quote(tmp_path):
    result = run_cli(["report", str(tmp_path / f"missing{SET_TITLE}")], tmp_path)
    assert result.returncode == 1
    assert_escaped(result.stderr)
