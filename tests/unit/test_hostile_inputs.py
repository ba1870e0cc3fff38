"""Inputs built to cost far more than their size (issue 41, attacks 2 to 4): a call stack interned
once and named by every sample, a pprof file of gzip'd zeros, a library whose compressed DWARF
claims gigabytes. Each is read by `droidheap report` in a child process held to 1 GiB of address
space and a timeout, so that a regression fails here quickly instead of eating the machine: it
must finish within them, or refuse in one line (a library's DWARF: a warning, the rest read)."""
import gzip
import json
import os
import pathlib
import resource
import shutil
import struct
import subprocess
import sys
import zlib

import pytest

from droidheap.bounded_inflate import inflate
from droidheap.elf.elf_file import ElfFile
from droidheap.errors import DroidheapError
from droidheap.pprof import MAX_STACK_FRAMES, Profile
from droidheap.results.load import PPROF_RATIO
from droidheap.trace.reader import encode_bytes_field
from fixtures_trace import APP, FakeMapping, TraceBuilder
from test_cli_errors import assert_one_line_error
from test_results_store import _two_dumps_one_sample_changed
from tests.requirements import require

MEMORY_LIMIT = 1 << 30
TIMEOUT = 60
ZEROS_GIB = 2  # what each bomb inflates to: twice the child's whole address space


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(tmp_path: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, DROIDHEAP_DEVICE_ROOT=str(tmp_path / "device"),
               DROIDHEAP_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-m", "droidheap.cli", *args], capture_output=True,
                          text=True, env=env, timeout=TIMEOUT, preexec_fn=_limited)


def report(tmp_path: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    return run(tmp_path, "report", *args)


def deflated_zeros(size: int, wbits: int) -> bytes:
    """`size` zero bytes (a multiple of 1 MiB) deflated, made in milliseconds: after a full
    flush the compressor starts afresh, so every further MiB deflates to the same bytes."""
    chunk = bytes(1 << 20)
    deflater = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    first = deflater.compress(chunk) + deflater.flush(zlib.Z_FULL_FLUSH)
    rest = deflater.compress(chunk) + deflater.flush(zlib.Z_FULL_FLUSH)
    body = first + rest * (size // len(chunk) - 1) + b"\x03\x00"  # an empty final block
    if wbits < 0:
        return body
    if wbits > zlib.MAX_WBITS:  # gzip: header, then CRC-32 and size
        crc = 0
        for _ in range(size // len(chunk)):
            crc = zlib.crc32(chunk, crc)
        return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + body +
                struct.pack("<II", crc, size & 0xFFFFFFFF))
    # zlib: header, then the Adler-32 of zeros (its sum `a` stays 1, `b` grows by 1 a byte)
    return b"\x78\xda" + body + struct.pack(">I", ((size % 65521) << 16) | 1)


def test_deflated_zeros_are_what_they_say():
    for wbits in (-zlib.MAX_WBITS, zlib.MAX_WBITS, 16 + zlib.MAX_WBITS):
        inflater = zlib.decompressobj(wbits)
        assert inflater.decompress(deflated_zeros(3 << 20, wbits)) == bytes(3 << 20)
        assert inflater.eof


def test_a_gzip_file_of_several_members_is_read_whole_and_bounded_whole():
    """gzip(1) reads every member of a file; so does inflate, the limit counting them all."""
    assert inflate(gzip.compress(b"one ") + gzip.compress(b"two"), "x") == b"one two"
    member = gzip.compress(bytes(600 << 10))  # within the 1 MiB floor alone, not twice over
    assert len(inflate(member, "x")) == 600 << 10
    with pytest.raises(DroidheapError, match="^x inflates to more than 1048576 bytes"):
        inflate(member + member, "x")


def test_a_stack_named_by_every_sample_costs_its_size_once(tmp_path):
    """A 15000-frame stack (a byte a frame: one frame named again and again) named by 2500
    samples: 60 KB that took 1.8 GB when every sample's stack was walked again."""
    builder = TraceBuilder().process(100, "app")
    stack = builder.callstack([(APP, 0x100)] * 15000)
    builder.dump({100: [(stack, i + 1, 0, 1, 0) for i in range(2500)]})
    trace = tmp_path / "trace"
    trace.write_bytes(builder.to_bytes())
    result = report(tmp_path, str(trace))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "2500 objects" in result.stdout


def test_a_stack_deeper_than_any_unwinder_writes_is_not_repeated_per_pprof_sample(tmp_path):
    """pprof lists each sample's stack whole: a 30000-frame stack named by 40000 samples, 620 KB
    of trace, would be 1.2 GB of pprof."""
    builder = TraceBuilder().process(100, "app")
    stack = builder.callstack([(APP, 0x100 + i % 64) for i in range(30000)])
    builder.dump({100: [(stack, 16 * (i + 1), 0, 1, 0) for i in range(40000)]})
    trace = tmp_path / "trace"
    trace.write_bytes(builder.to_bytes())
    result = run(tmp_path, "symbolize", str(trace), "-o", str(tmp_path / "out"))
    assert_one_line_error(result, f"take at most {MAX_STACK_FRAMES}")


def test_a_pprof_of_gzipd_zeros_is_refused_in_one_line(tmp_path):
    bomb = tmp_path / "heap.pb.gz"
    bomb.write_bytes(deflated_zeros(ZEROS_GIB << 30, 16 + zlib.MAX_WBITS))
    assert bomb.stat().st_size < 4 << 20
    result = report(tmp_path, str(bomb))
    assert_one_line_error(result, f"inflates to more than {PPROF_RATIO} times its size")


def test_a_pprof_whose_stacks_expand_past_any_honest_depth_is_refused_in_one_line(tmp_path):
    """One location of 4000 inlined lines, named k times by the stack of sample k (k to 300): 70
    KB whose stacks expand to 180 million frames, 1.4 GB of references."""
    profile = Profile()
    profile.string_table.append("")
    profile.function.add(id=1)
    location = profile.location.add(id=1)
    for _ in range(4000):
        location.line.add(function_id=1)
    for k in range(1, 301):
        profile.sample.add(location_id=[1] * k, value=[1])
    path = tmp_path / "stacks.pprof"
    path.write_bytes(profile.SerializeToString())
    assert path.stat().st_size < 80_000
    result = report(tmp_path, str(path))
    assert_one_line_error(result, "its call stacks expand to more than")


def test_a_pprof_location_of_millions_of_lines_is_refused_before_it_is_expanded(tmp_path):
    """One location of 6 million lines (4 bytes each), named by one sample: its Locations were
    made, 150 bytes each, before any stack was counted."""
    lines = encode_bytes_field(4, b"\x08\x01") * 6_000_000  # Location.line {function_id: 1}
    path = tmp_path / "lines.pprof"
    path.write_bytes(b"\x32\x00" + b"\x2a\x02\x08\x01"  # string_table "", function {id: 1}
                     + encode_bytes_field(4, b"\x08\x01" + lines)  # location {id: 1, lines}
                     + b"\x12\x04\x08\x01\x10\x01")  # sample {location_id: 1, value: 1}
    assert_one_line_error(report(tmp_path, str(path)), "its call stacks expand to more than")


def test_a_stored_dump_claiming_a_trillion_places_is_refused_in_one_line(tmp_path):
    """A dump stored as its changes since the one before names its length: 2**40 places, a few
    bytes, were allocated before being found empty."""
    path = _two_dumps_one_sample_changed(tmp_path)
    data = json.loads(gzip.decompress(path.read_bytes()))
    data["profiles"][1]["length"] = 1 << 40
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    assert_one_line_error(report(tmp_path, str(path.parent)),
                          "a profile's changes are not places in it")


def _debug_info_claiming(library: pathlib.Path, kind: str, claimed: int) -> None:
    """Makes `library`'s .debug_info (ELF64, little-endian) claim `claimed` bytes: `compressed`,
    a SHF_COMPRESSED section of that many zeros deflated; `zdebug`, the same as `.zdebug_info`
    (GNU's older format, "ZLIB" and the size before the zlib stream) claiming 1 MiB; `nobits`,
    a section with no bytes in the file, which pyelftools reads as that many zeros. What a
    section holds is appended at the end of the file and its header pointed at it."""
    raw = bytearray(library.read_bytes())
    shoff, = struct.unpack_from("<Q", raw, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", raw, 0x3A)
    names = shoff + shstrndx * shentsize
    names_at, names_size = struct.unpack_from("<QQ", raw, names + 24)
    for i in range(shnum):
        header = shoff + i * shentsize
        name_at, = struct.unpack_from("<I", raw, header)
        if raw[names_at + name_at:].startswith(b".debug_info\0"):
            break
    else:
        raise AssertionError("no .debug_info")
    flags, = struct.unpack_from("<Q", raw, header + 8)
    if kind == "nobits":
        struct.pack_into("<I", raw, header + 4, 8)  # SHT_NOBITS
        struct.pack_into("<Q", raw, header + 32, claimed)
        library.write_bytes(raw)
        return
    zeros = deflated_zeros(claimed, zlib.MAX_WBITS)
    if kind == "compressed":
        data = struct.pack("<IIQQ", 1, 0, claimed, 1) + zeros  # Elf64_Chdr: ELFCOMPRESS_ZLIB
        flags |= 0x800  # SHF_COMPRESSED
    else:
        data = b"ZLIB" + struct.pack(">Q", 1 << 20) + zeros
        # A names table of its own, at the end, with ".zdebug_info" in it.
        table = bytes(raw[names_at:names_at + names_size]) + b".zdebug_info\0"
        struct.pack_into("<I", raw, header, len(table) - len(b".zdebug_info\0"))
        struct.pack_into("<QQ", raw, names + 24, len(raw), len(table))
        raw += table
    struct.pack_into("<QQQQ", raw, header + 8, flags, 0, len(raw), len(data))
    library.write_bytes(bytes(raw) + data)


@pytest.mark.parametrize("kind", ["compressed", "zdebug", "nobits"])
def test_a_library_whose_dwarf_inflates_to_gigabytes_is_left_unsymbolized(program, tmp_path,
                                                                           kind):
    symbols = tmp_path / "symbols"
    symbols.mkdir()
    library = symbols / "libbomb.so"
    shutil.copy(program.path, library)
    _debug_info_claiming(library, kind, ZEROS_GIB << 30)
    mapping = FakeMapping("/data/local/tmp/libbomb.so", bytes.fromhex(program.build_id),
                          start=0x5500_0000, end=0x5510_0000)
    builder = TraceBuilder().process(100, "app")
    stack = builder.callstack([(mapping, program.return_addresses["malloc"])])
    builder.dump({100: [(stack, 64, 0, 1, 0)]})
    trace = tmp_path / "trace"
    trace.write_bytes(builder.to_bytes())
    result = report(tmp_path, str(trace), "--symbols", str(symbols))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    warning = [line for line in result.stdout.splitlines()
               if line.startswith("warning:") and "libbomb.so" in line]
    assert warning and "inflates to more than" in warning[0], result.stdout
    assert "in 1 objects" in result.stdout  # the rest is read


def test_inlined_calls_nested_past_any_honest_depth_are_refused(tmp_path):
    """Each address keeps its chain of inlined calls whole: a unit nesting them 300 deep at every
    instruction would cost the square of its scopes; its inlined calls are refused instead."""
    require(None if shutil.which("gcc") else "gcc is not installed")
    inline = "static inline __attribute__((always_inline)) void *"
    source = ["#include <stdlib.h>", "volatile int sink;",
              f"{inline}f0(size_t n) {{ sink++; return malloc(n); }}"]
    source += [f"{inline}f{i}(size_t n) {{ sink++; return f{i - 1}(n + {i}); }}"
               for i in range(1, 300)]
    source.append("int main(int argc, char **argv) { free(f299(argc)); return 0; }")
    (tmp_path / "deep.c").write_text("\n".join(source) + "\n")
    subprocess.run(["gcc", "-g", "-O1", str(tmp_path / "deep.c"), "-o", str(tmp_path / "deep")],
                   check=True, capture_output=True)
    elf = ElfFile(tmp_path / "deep")
    main = elf.elf.get_section_by_name(".symtab").get_symbol_by_name("main")[0]["st_value"]
    with pytest.raises(ValueError, match="nest more than 32 deep on average"):
        elf.scopes_at(main + 0x100)
