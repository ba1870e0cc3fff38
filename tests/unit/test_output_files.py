"""BackgroundWrites (output_files.py): a conversion's gzip'd files compressed and written on a
thread beside it; every file written by the end of the block, or the first error raised there,
and the block's own error said before any of the writes'."""
import gzip

import pytest

from droidheap.convert import convert_trace
from droidheap.errors import DroidheapError
from droidheap.output_files import BackgroundWrites
from fixtures_trace import two_process_trace


def test_every_file_is_written_by_the_end_of_the_block(tmp_path):
    data = [bytes([i]) * (i * 1000) for i in range(12)]
    with BackgroundWrites(pending=2) as files:
        for i, payload in enumerate(data):
            files.write_gzip(tmp_path / f"{i}.gz", payload)
    assert [gzip.decompress((tmp_path / f"{i}.gz").read_bytes()) for i in range(12)] == data
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{i}.gz" for i in range(12))


def test_a_write_that_fails_is_raised_by_the_block(tmp_path):
    with pytest.raises(FileNotFoundError):
        with BackgroundWrites() as files:
            files.write_gzip(tmp_path / "missing" / "a.gz", b"x")
            files.write_gzip(tmp_path / "b.gz", b"y")
    assert (tmp_path / "b.gz").is_file()  # the others still written


def test_the_blocks_own_error_comes_first(tmp_path):
    with pytest.raises(KeyError):
        with BackgroundWrites() as files:
            files.write_gzip(tmp_path / "missing" / "a.gz", b"x")
            raise KeyError("the block's")


def test_a_pprof_file_that_cannot_be_written_is_one_error_of_the_conversion(tmp_path):
    raw = tmp_path / "raw-trace"
    raw.write_bytes(two_process_trace().to_bytes())
    out = tmp_path / "out"
    (out / "heap_dump.1.100.libc.malloc.pb.gz").mkdir(parents=True)  # a directory at its name
    with pytest.raises(DroidheapError, match=r"^cannot write the outputs to .*out: .*"
                                             r"heap_dump\.1\.100") as error:
        convert_trace(raw, out)
    assert "\n" not in str(error.value)
