"""The libFuzzer targets (ndk_client/fuzz/) run for a bounded time each, from seeds made of real
input (a genuine hello, a real ELF file's call-frame information, well-formed records): the
daemon's peers and files may send anything, and nothing may crash, hang, leak fds or trip ASan or
UBSan.

DROIDHEAP_FUZZ_SECONDS sets the time per target (default 10; the closing notes of issue 11 give
longer runs). They are built in the ASan+UBSan tree of the native tests (tests/conftest.py). What a
run finds is written to build/native-address-undefined-clang/findings/<target>/ to be replayed:
`build/native-address-undefined-clang/fuzz/<target>_fuzzer <file>`."""
import os
import pathlib
import re
import shutil
import struct
import subprocess

import pytest
from elftools.elf.elffile import ELFFile

from tests.android import write_apk

# Minutes of work: started before the short modules, so that the run ends on short ones
# (tests/conftest.py, _start_order).
RUNS_LONG = True
SECONDS = int(os.environ.get("DROIDHEAP_FUZZ_SECONDS", "10"))
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _hello_seeds():
    hello = struct.pack("<IIIiQII", 0x50414548, 5, 32, 1234, 0, 1, 0)
    genuine_fds = 14  # two fds: this process's maps, then its mem (handshake_fuzzer.cc: FdsFor)
    yield struct.pack("<BH", genuine_fds, len(hello)) + hello
    # Sent in two pieces, the fds with the first.
    yield (struct.pack("<BH", genuine_fds, 10) + hello[:10] +
           struct.pack("<BH", 0, len(hello) - 10) + hello[10:])


def _expression_seeds():
    # flags, seed, initial, then the expression: DW_OP_breg7 +8; DW_OP_deref (x86_64 PLT-like),
    # and DW_OP_lit1 DW_OP_lit2 DW_OP_plus DW_OP_skip 0.
    yield struct.pack("<BQQ", 0, 0x1234, 0x7000) + bytes([0x77, 0x08, 0x06])
    yield struct.pack("<BQQ", 2, 0, 0x7000) + bytes([0x31, 0x32, 0x22, 0x2f, 0x00, 0x00])


def _cfi_seeds():
    with open("/bin/true", "rb") as f:
        elf = ELFFile(f)
        address_size = 4 if elf.elfclass == 32 else 8
        text = elf.get_section_by_name(".text")
        seed = struct.pack("<B", 1 if address_size == 4 else 0)
        for name in (".eh_frame", ".eh_frame_hdr", ".debug_frame"):
            section = elf.get_section_by_name(name)
            data = section.data()[:65535] if section else b""
            seed += struct.pack("<HI", len(data), section["sh_addr"] if section else 0) + data
        start = text["sh_addr"]
        seed += b"".join(struct.pack("<I", (start + 97 * k) & 0xffffffff) for k in range(8))
    yield seed


def _ehabi_seeds():
    # A file of 0x400 bytes, all one executable segment at vaddr 0x1000: .ARM.exidx at 0x100 with
    # an inline entry, one to a model-1 .ARM.extab entry at 0x200, and CANTUNWIND; pcs in each.
    file = bytearray(0x400)

    def put(offset, word):
        file[offset:offset + 4] = struct.pack("<I", word)

    def prel31(target, at):
        return (target - at) & 0x7fffffff

    put(0x100, prel31(0x1010, 0x1100))
    put(0x104, 0x80a8b0b0)
    put(0x108, prel31(0x1040, 0x1108))
    put(0x10c, prel31(0x1200, 0x110c))
    put(0x110, prel31(0x1080, 0x1110))
    put(0x114, 1)
    put(0x200, 0x8101a8b1)  # pop {r4, lr}; pop {r0}; vsp = r7; finish
    put(0x204, 0x0197b0b0)
    header = struct.pack("<HHI", 0x100, 24, 0x1100)
    header += struct.pack("<HIHB", 0, 0x1000, 0x400, 1) + struct.pack("<HIHB", 0, 0, 0, 0)
    header += struct.pack("<IIII", 0x1012, 0x1044, 0x1090, 0x0fff)
    stack = b"".join(struct.pack("<I", 0x10000 + 4 * i) for i in range(32))
    yield header + struct.pack("<B", 32) + stack + bytes(file)


def _records_seeds():
    # Mode bit 1: a client of protocol 6, whose AllocRecords carry all 33 registers; else the
    # x86_64 client's 8, packed. Mode bit 2: the records never end (a client rewrites one
    # whenever there is room, through a dump and after its socket closes). Mode bits 3-4: the
    # client's rings less one (ring_set.h). A record's type is in the low 4 bits of its first
    # byte, its ring in the high ones: a block's free in its allocation's ring, or in another.
    for mode, registers in ((0, 8), (2, 33), (3 << 3, 8)):
        alloc = struct.pack("<QQQQQII", 1, 0x1000, 16, 16, 0, 1, 64) + bytes(8 * registers)
        alloc += bytes(64)
        free = struct.pack("<QQ", 2, 0x1000)
        stats = struct.pack("<QQQ", 100, 200, 300)
        for free_ring in (1, 2) if mode >> 3 else (0,):
            records = b"".join(struct.pack("<BH", kind, len(body)) + body
                               for kind, body in ((0x11 if mode >> 3 else 1, alloc),
                                                  (2 | free_ring << 4, free), (3, stats)))
            yield struct.pack("<BQB", mode, 0, 3) + records + b"\0"
            # With a thread scribbling meanwhile.
            yield struct.pack("<BQB", mode | 1, 42, 3) + records + b"\0"
            yield struct.pack("<BQB", mode | 4, 0, 3) + records + b"\0"


def _block_list_seeds():
    # Request 1, at most 100 blocks (block_list_fuzzer.cc: each message is its shape, its size as
    # received when the shape says so, then its bytes): two messages of its own (the first with
    # two blocks, the second the last, with one), an earlier request's between them; and one cut
    # short, then the allocator refusing.
    def body(request, flags, blocks):
        return struct.pack("<IIIIQIi", 0x50414e53, 2, 32 + 16 * 2048, len(blocks), request, flags,
                           0) + b"".join(struct.pack("<QQ", start, end) for start, end in blocks)

    def message(request, flags, blocks):
        sent = body(request, flags, blocks)
        return struct.pack("<BH", 0x11, len(sent)) + sent
    yield (struct.pack("<BH", 1, 100) + message(1, 0, [(0x1000, 0x1040), (0x2000, 0x2010)]) +
           message(0, 1, [(0x3000, 0x3008)]) + message(1, 1, [(0x4000, 0x4100)]))
    short = body(1, 0, [])
    yield (struct.pack("<BH", 1, 100) + struct.pack("<BHH", 0x10, 40, len(short)) + short +
           message(1, 3, []))


def _apk_seeds(tmp_path):
    # An APK holding /bin/true as a stored, page-aligned library, mapped at its entry's first and
    # second pages, with pcs in its .text; and the file alone (an ELF file at 0).
    true = pathlib.Path("/bin/true").read_bytes()
    with open("/bin/true", "rb") as f:
        start = ELFFile(f).get_section_by_name(".text")["sh_addr"]
    pcs = struct.pack("<4I", *((start + 97 * k) & 0xffffffff for k in range(4)))
    apk = tmp_path / "base.apk"
    offsets = write_apk(apk, {"AndroidManifest.xml": b"<manifest/>",
                              "lib/x86_64/libtrue.so": true, "classes.dex": bytes(3000)},
                        compressed=["classes.dex"])
    entry = offsets["lib/x86_64/libtrue.so"]
    for mapping_offset in (entry, entry + 4096):
        yield struct.pack("<I", mapping_offset) + pcs + apk.read_bytes()
    yield struct.pack("<I", 0) + pcs + true


SEEDS = {"handshake": _hello_seeds, "expression": _expression_seeds, "cfi": _cfi_seeds,
         "records": _records_seeds, "ehabi": _ehabi_seeds, "apk": _apk_seeds,
         "block_list": _block_list_seeds}


@pytest.mark.parametrize("target", SEEDS)
def test_fuzzer_finds_nothing(fuzz_build, target, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    seeds = SEEDS[target]
    for i, seed in enumerate(seeds(tmp_path) if target == "apk" else seeds()):
        (corpus / f"seed-{i}").write_bytes(seed)
    findings = fuzz_build / "findings" / target
    shutil.rmtree(findings, ignore_errors=True)
    findings.mkdir(parents=True)
    result = subprocess.run(
        [fuzz_build / "fuzz" / f"{target}_fuzzer", f"-max_total_time={SECONDS}", "-timeout=10",
         "-rss_limit_mb=2048", "-print_final_stats=1", f"-artifact_prefix={findings}/", corpus],
        capture_output=True, text=True, timeout=SECONDS + 300,
        env=dict(os.environ, ASAN_OPTIONS="detect_leaks=1", UBSAN_OPTIONS="print_stacktrace=1"))
    executions = re.search(r"stat::number_of_executed_units: (\d+)", result.stderr)
    found = sorted(p.name for p in findings.iterdir())
    assert result.returncode == 0 and not found, \
        f"{target}_fuzzer found {found} (in {findings}):\n{result.stderr[-6000:]}"
    # Said in the test's output (pytest -s, or -rA) for the closing notes.
    print(f"{target}_fuzzer: {executions[1] if executions else '?'} executions in {SECONDS} s, "
          f"nothing found")
    assert executions and int(executions[1]) > 100, result.stderr[-3000:]
