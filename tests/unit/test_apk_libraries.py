"""An app's native library mapped straight from its APK, as droidheapd names it
(`…/base.apk!/lib/x86_64/libfoo.so`): only the entry's bytes cross the cable, kept per build id;
it is symbolized from an app's build tree given with --symbols, found by name or build id below
it; an entry no linker maps is refused with the reason, never read in part; and the trace's
offsets (the mapping's and the ELF file's) are read as heapprofd's libunwindstack gives them."""
import os
import pathlib
import shutil
import struct
import subprocess

import pytest

from droidheap.apk_library import ApkReader, library_file_name, split_library_path
from droidheap.convert import convert_trace
from droidheap.device_files import fetch_device_files
from droidheap.errors import DroidheapError
from droidheap.symbolizer import Symbolizer
from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import parse_trace
from tests.android import write_apk
from tests.e2e.trace_check import last_pprof_of

from fixtures_trace import FakeMapping, TraceBuilder

APK = "/data/app/~~Xy3==/com.example.app-Zq9==/base.apk"
ENTRY = "lib/x86_64/liballoc.so"
LIBRARY = f"{APK}!/{ENTRY}"


class ApkDevice:
    """Serves host files as a phone's, counting what crosses the cable."""

    def __init__(self, files):
        self.files = files
        self.bytes_read = 0
        self.reads = 0
        self.fetched = []

    def file_size(self, remote):
        if remote not in self.files:
            raise DroidheapError(f"no file {remote}")
        return os.path.getsize(self.files[remote])

    def read_range(self, remote, offset, size):
        with open(self.files[remote], "rb") as f:
            f.seek(offset)
            data = f.read(size)
        self.reads += 1
        self.bytes_read += len(data)
        return data

    def fetch_files(self, remotes, local_dir):
        self.fetched += remotes
        return local_dir


def apk_with(tmp_path, library: bytes, compressed=()) -> pathlib.Path:
    """An APK holding `library` at ENTRY between 4 MiB of other entries, as an app's is."""
    apk = tmp_path / "base.apk"
    write_apk(apk, {"AndroidManifest.xml": b"<manifest/>", "classes.dex": os.urandom(2 << 20),
                    ENTRY: library, "assets/big.bin": os.urandom(2 << 20)}, compressed)
    return apk


def test_split_library_path():
    assert split_library_path(LIBRARY) == (APK, ENTRY)
    assert split_library_path(f"{APK}!liballoc.so") == (APK, "liballoc.so")  # heapprofd's
    assert split_library_path("/system/lib64/libc.so") is None
    assert split_library_path("/x.apk!/") is None
    assert library_file_name(LIBRARY) == library_file_name(f"{APK}!liballoc.so") == "liballoc.so"


def test_heapprofds_name_finds_the_entry_of_its_build_id(program, tmp_path):
    """The platform's heapprofd names the library by its soname: of the ABIs' copies of that
    name, the one whose build id the trace gives."""
    library = pathlib.Path(program.path).read_bytes()
    apk = tmp_path / "base.apk"
    write_apk(apk, {"lib/armeabi-v7a/liballoc.so": b"\x7fELF another ABI's",
                    "assets/liballoc.so": b"not a library", ENTRY: library})
    device = ApkDevice({APK: apk})
    warnings = []
    out = fetch_device_files(device, [(f"{APK}!liballoc.so", program.build_id)],
                             tmp_path / "out", tmp_path / "cache", warnings)
    assert warnings == []
    assert (out / f"{APK}!liballoc.so".lstrip("/")).read_bytes() == library


def test_only_the_librarys_bytes_cross_the_cable_and_once(program, tmp_path):
    library = pathlib.Path(program.path).read_bytes()
    device = ApkDevice({APK: apk_with(tmp_path, library)})
    cache = tmp_path / "cache"
    warnings = []
    out = fetch_device_files(device, [(LIBRARY, program.build_id)], tmp_path / "one", cache,
                             warnings)
    assert warnings == [] and device.fetched == []  # nothing asked of the sync service
    placed = out / LIBRARY.lstrip("/")
    assert placed.read_bytes() == library
    # The zip's directory and the entry's local header, then the entry: a few reads.
    assert device.reads <= 6 and device.bytes_read < len(library) + 256 * 1024, \
        (device.reads, device.bytes_read)
    read = device.bytes_read
    again = fetch_device_files(device, [(LIBRARY, program.build_id)], tmp_path / "two", cache)
    assert (again / LIBRARY.lstrip("/")).read_bytes() == library
    assert device.bytes_read == read  # from the cache


@pytest.mark.parametrize("damage, reason", [
    ("compressed", "is compressed"),
    ("missing", f"no entry {ENTRY}"),
    ("truncated", "not a readable zip file"),
    ("not a zip", "not a readable zip file"),
])
def test_an_entry_no_linker_maps_is_refused_with_the_reason(program, tmp_path, damage, reason):
    library = pathlib.Path(program.path).read_bytes()
    apk = apk_with(tmp_path, library, compressed=[ENTRY] if damage == "compressed" else [])
    if damage == "missing":
        write_apk(apk, {"AndroidManifest.xml": b"<manifest/>"})
    elif damage == "truncated":
        apk.write_bytes(apk.read_bytes()[:len(library) + 8192])
    elif damage == "not a zip":
        apk.write_bytes(library)
    warnings = []
    out = tmp_path / "out"
    assert fetch_device_files(ApkDevice({APK: apk}), [(LIBRARY, program.build_id)], out,
                              tmp_path / "cache", warnings) is None
    assert not (out / LIBRARY.lstrip("/")).exists()
    (warning,) = warnings
    assert warning.startswith(f"cannot read {ENTRY} from {APK}: ") and reason in warning, warning


def test_an_entry_that_claims_bytes_past_the_end_is_refused(tmp_path):
    apk = tmp_path / "base.apk"
    write_apk(apk, {ENTRY: b"\x7fELF" + bytes(10000)})
    data = bytearray(apk.read_bytes())
    directory = data.index(b"PK\x01\x02")
    struct.pack_into("<II", data, directory + 20, 10_000_000, 10_000_000)  # its two sizes
    with pytest.raises(DroidheapError, match="past the end of the file"):
        ApkReader(lambda offset, size: bytes(data[offset:offset + size]), len(data)) \
            .stored_entry(ENTRY)


class HugeDirectoryApk:
    """A device's APK of `size` bytes (zeros) whose end record gives a central directory of
    `directory` bytes: one no host should read. Notes the largest read asked for."""

    def __init__(self, size: int, directory: int, directory_offset: int = 0):
        self.size = size
        self.largest_read = 0
        self.tail = struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, 1, 1, directory,
                                directory_offset or size - directory - 22, 0)

    def file_size(self, remote):
        return self.size

    def read_range(self, remote, offset, size):
        self.largest_read = max(self.largest_read, size)
        assert size <= 16 << 20, f"the host asked the phone for {size} bytes at once"
        data = bytearray(max(0, min(size, self.size - offset)))
        tail_at = self.size - len(self.tail)
        for i in range(max(offset, tail_at), min(offset + len(data), self.size)):
            data[i - offset] = self.tail[i - tail_at]
        return bytes(data)


def test_a_zip_directory_larger_than_droidheapd_reads_is_refused_unread(tmp_path):
    """As droidheapd refuses it (zip_entry.cc): 64 MiB holds the directory of any real APK."""
    device = HugeDirectoryApk(size=300 << 20, directory=256 << 20)
    warnings = []
    assert fetch_device_files(device, [(LIBRARY, "ab" * 20)], tmp_path / "out",
                              tmp_path / "cache", warnings) is None
    assert warnings == [f"cannot read {ENTRY} from {APK}: its zip directory is 268435456 bytes, "
                        "more than the 67108864 droidheap reads; its frames stay unnamed"]
    assert device.largest_read < 1 << 20


def test_a_zip64_file_is_refused_as_droidheapd_refuses_it():
    device = HugeDirectoryApk(size=8 << 20, directory=0xffffffff, directory_offset=4096)
    with pytest.raises(DroidheapError, match=r"not a readable zip file \(a zip64 file\)"):
        ApkReader(lambda offset, size: device.read_range(APK, offset, size), device.size)


def gradle_tree(program, root: pathlib.Path) -> pathlib.Path:
    """An app module's build directory as the Android Gradle plugin leaves it: the unstripped
    library, and the stripped copy it packed into the APK (same build id, smaller)."""
    intermediates = root / "app" / "build" / "intermediates"
    unstripped = intermediates / "merged_native_libs" / "debug" / "out" / "lib" / "x86_64"
    stripped = intermediates / "stripped_native_libs" / "debug" / "out" / "lib" / "x86_64"
    for directory in (unstripped, stripped):
        directory.mkdir(parents=True)
    shutil.copyfile(program.path, unstripped / "liballoc.so")
    subprocess.run(["strip", "-o", str(stripped / "liballoc.so"), program.path], check=True)
    return stripped / "liballoc.so"


def apk_trace(program, tmp_path) -> pathlib.Path:
    """A trace whose stacks run through the library mapped from the APK at 0x9000 (its code at
    the mapping's offset 0xa000: the ELF file's 0x1000)."""
    mapping = FakeMapping(LIBRARY, bytes.fromhex(program.build_id), start=0x7100_0000,
                          end=0x7100_4000, offset=0x9000, exact_offset=0xa000, load_bias=0)
    b = TraceBuilder().clock_snapshot().process(7, "com.example.app")
    stack = b.callstack([(mapping, program.return_addresses["middle"]),
                         (mapping, program.return_addresses["leaf_alloc"])])
    b.dump({7: [(stack, 4096, 0, 1, 0)]})
    raw = tmp_path / "raw-trace"
    raw.write_bytes(b.to_bytes())
    return raw


def test_a_library_in_an_apk_is_symbolized_from_the_apps_build_tree(program, tmp_path):
    """--symbols names the project: the unstripped library is found below it by name, not the
    stripped copy beside it; the pprof file and the Perfetto trace name the library as the
    linker does."""
    packed = gradle_tree(program, tmp_path / "project")
    raw = apk_trace(program, tmp_path)
    device = ApkDevice({APK: apk_with(tmp_path, packed.read_bytes())})
    out = tmp_path / "out"
    result = convert_trace(raw, out, [tmp_path / "project"],
                           fetch_files=lambda modules, warnings: fetch_device_files(
                               device, modules, out / "device-files", tmp_path / "cache",
                               warnings))
    assert result.warnings == [], result.warnings
    assert "middle (alloc_prog.c:" in result.summary_text, result.summary_text
    profile = last_pprof_of(out, 7)
    assert [profile.string_table[m.filename] for m in profile.mapping] == [LIBRARY]
    assert profile.mapping[0].file_offset == 0x1000  # the ELF file's, as pprof's tools expect
    symbolized = rebuild_dumps(parse_trace(result.symbolized_trace.read_bytes()).packets)
    (dump,) = symbolized.dumps[7]
    assert {frame.mapping.path for frame in dump.samples[0].frames} == {LIBRARY}


def test_found_by_build_id_wherever_it_lies(program, tmp_path):
    renamed = tmp_path / "symbols" / "deep" / "down" / "renamed.so.debug"
    renamed.parent.mkdir(parents=True)
    shutil.copyfile(program.path, renamed)
    (tmp_path / "symbols" / "liballoc.so").write_bytes(b"not this one")
    elf = Symbolizer([tmp_path / "symbols"]).find_elf(LIBRARY, program.build_id)
    assert elf is not None and elf.path == renamed


def test_the_traces_offsets_are_the_mappings_and_the_elf_files(tmp_path):
    """droidheapd (and Android 11's heapprofd): exact_offset the mapping's, start_offset the ELF
    file's. Android 10's heapprofd: start_offset alone, the mapping's. droidheapd before
    2026-11-27: the mapping's in both."""
    b = TraceBuilder().clock_snapshot().process(7, "app")
    mappings = {
        "apk": FakeMapping(LIBRARY, start=0x1000, offset=0x9000, exact_offset=0xa000),
        "first segment": FakeMapping(LIBRARY, start=0x2000, offset=0x9000, exact_offset=0x9000),
        "android10": FakeMapping("/system/lib64/libc.so", start=0x3000, offset=0x4000),
        "before": FakeMapping("/system/lib64/libm.so", start=0x4000, offset=0x5000,
                              exact_offset=0x5000),
    }
    stacks = [b.callstack([(m, 0x1234)]) for m in mappings.values()]
    b.dump({7: [(stack, 4096, 0, 1, 0) for stack in stacks]})
    (dump,) = rebuild_dumps(parse_trace(b.to_bytes()).packets).dumps[7]
    read = {sample.frames[0].mapping.start: sample.frames[0].mapping for sample in dump.samples}
    offsets = {name: (read[m.start].offset, read[m.start].elf_file_offset)
               for name, m in mappings.items()}
    assert offsets == {"apk": (0xa000, 0x1000), "first segment": (0x9000, 0),
                       "android10": (0x4000, 0x4000), "before": (0x5000, 0x5000)}
    assert read[0x1000].pc(0x1234) == 0x1000 + 0x1234 - 0x1000
