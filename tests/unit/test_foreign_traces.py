"""A trace this machine did not make names paths that are data (issue 41, attack 5): opened here,
they would put this machine's files' symbols, source paths and lines into outputs the trace's
author may read, and a path that is not ELF would say it exists. Only a trace the local device
made (made_here.py), and a conversion of one, has its paths opened here; `--symbols /` opens them
as the user's own decision."""
import pathlib
import shutil

import pytest

from droidheap.convert import convert_trace
from droidheap.results.load import load_results
from fixtures_trace import FakeMapping

from test_convert import _trace


@pytest.fixture(autouse=True)
def _cache_of_its_own(tmp_path, monkeypatch):
    """Each test's own cache: the traces here are the same bytes, and one that a test converted
    as made on this machine is known as such from then on (made_here.py), in any test after it."""
    monkeypatch.setenv("DROIDHEAP_CACHE_DIR", str(tmp_path / "cache"))


def _foreign_trace(program, other_pid: int = 0) -> bytes:
    """The test program's frames at its own path on this machine, and a frame in a file of this
    machine that is not ELF, as a phone (or anyone) could write them."""
    builder = _trace(program)
    if other_pid:
        builder.process(other_pid, "another")
    secret = FakeMapping("/etc/passwd", b"", start=0x6000_0000, end=0x6000_1000)
    stack = builder.callstack([(secret, 0x100)])
    builder.dump({321: [(stack, 64, 0, 1, 0)]})
    return builder.to_bytes()


def _functions(path: pathlib.Path) -> set:
    """The functions of every frame of every dump of a trace or output directory, as `report`
    reads it."""
    return {frame.function for profile in load_results(path).profiles
            for sample in profile.samples for frame in sample.stack}


def test_a_foreign_traces_paths_are_not_opened_here(program, tmp_path):
    raw = tmp_path / "raw-trace"
    raw.write_bytes(_foreign_trace(program))
    result = convert_trace(raw, tmp_path / "out")
    assert "leaf_alloc" not in _functions(result.symbolized_trace)
    text = "\n".join(result.warnings)
    assert "passwd: not an ELF file" not in text, text
    assert f"{raw} was not made on this machine" in text, text
    # Nothing of the program reached the outputs.
    assert b"alloc_prog.c" not in (tmp_path / "out" / "report.html").read_bytes()
    # Nor `report` of the trace itself.
    assert "leaf_alloc" not in _functions(raw)


def test_the_users_symbol_directories_still_serve_it(program, tmp_path):
    raw = tmp_path / "raw-trace"
    raw.write_bytes(_foreign_trace(program))
    result = convert_trace(raw, tmp_path / "out", search_dirs=[program.path.parent])
    assert "leaf_alloc" in _functions(result.symbolized_trace)


def test_a_trace_the_local_device_made_and_its_conversions_keep_their_paths(program, tmp_path):
    made = tmp_path / "made"
    made.mkdir()
    (made / "raw-trace").write_bytes(_foreign_trace(program))
    first = convert_trace(made / "raw-trace", made, made_locally=True)
    assert "leaf_alloc" in _functions(first.symbolized_trace)
    assert not any("not made on this machine" in w for w in first.warnings), first.warnings
    # A copy anywhere, later, converted or reported: the trace is known.
    copy = tmp_path / "copy"
    shutil.copy(made / "raw-trace", copy)
    again = convert_trace(copy, tmp_path / "out-copy")
    assert "leaf_alloc" in _functions(again.symbolized_trace)
    assert "leaf_alloc" in _functions(copy)
    # Another trace naming the same files is not.
    other = tmp_path / "other"
    other.write_bytes(_foreign_trace(program, other_pid=999))
    assert "leaf_alloc" not in _functions(convert_trace(other, tmp_path / "o").symbolized_trace)
