"""A library an app's APK stores, read from the device by its bytes alone.

Android's linker maps an app's native library straight from its APK when the zip stores it
uncompressed and page-aligned. droidheapd names the mapping as the linker does,
`/data/app/…/base.apk!/lib/arm64-v8a/libfoo.so` (the zip's entry); the platform's heapprofd (its
libunwindstack) as tombstones do, `/data/app/…/base.apk!libfoo.so` (the library's soname, which
the NDK makes its file name). To symbolize it, only that entry's bytes cross the cable, not the
whole APK: the zip's end record (found backwards through its comment), its central directory and
the entry's local header, then the entry's data. A soname is looked for among the entries of that
file name, the build id telling the ABIs' copies apart.

The APK is the app's (hostile input): the directory is read as droidheapd reads it
(ndk_client/unwinder/zip_entry.cc) -- no zip64, at most MAX_DIRECTORY_SIZE bytes, every record
bounds-checked --, the entry must be stored, its sizes agree and lie inside the file, and what is
read is capped, or the library is refused with the reason. Records are little-endian
(APPNOTE.TXT 4.3): the end record is 22 bytes and a comment, each directory entry 46 bytes and
its name, extra field and comment, each local header 30 bytes and its name and extra field.
"""
import posixpath
import struct
from typing import Callable, Iterator, List, NamedTuple, Optional, Tuple

from droidheap.errors import DroidheapError

SEPARATOR = "!/"
# Larger than any native library an app ships; a bigger "library" is refused, not read.
MAX_LIBRARY_SIZE = 1 << 30
# As droidheapd's: an APK of 100k entries has a directory of about 10 MiB.
MAX_DIRECTORY_SIZE = 64 << 20
_END_RECORD = struct.Struct("<4s8xIIH")  # signature, ..., directory size and offset, comment length
_END_SIGNATURE = b"PK\x05\x06"
_MAX_COMMENT = 0xffff
# signature, ..., flags, method, ..., compressed and uncompressed sizes, name, extra and comment
# lengths, ..., local header offset
_DIRECTORY_ENTRY = struct.Struct("<4s4xHH8xIIHHH8xI")
_DIRECTORY_SIGNATURE = b"PK\x01\x02"
_UTF8_NAME = 0x800  # general purpose flag 11: the name is UTF-8, else code page 437
_STORED = 0
_ZIP64 = 0xffffffff  # a directory size or offset this large says the zip64 record holds it
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name length, extra length
_LOCAL_SIGNATURE = b"PK\x03\x04"

ReadRange = Callable[[int, int], bytes]  # (offset, size) -> the bytes there, fewer at the end


def split_library_path(path: str) -> Optional[Tuple[str, str]]:
    """(APK path, entry or soname) of a library inside an APK; None for any other path."""
    apk, separator, entry = path.partition(SEPARATOR)
    if not separator:  # heapprofd's form: "!" in the last component
        directory, _, name = path.rpartition("/")
        apk, separator, entry = name.partition("!")
        apk = f"{directory}/{apk}"
    return (apk, entry) if separator and apk and entry else None


def library_file_name(path: str) -> str:
    """The file name of the library `path` names: "libfoo.so" for a library inside an APK."""
    split = split_library_path(path)
    return posixpath.basename(split[1] if split else path)


class _Entry(NamedTuple):
    """What the central directory says of one entry."""
    name: str
    method: int
    compressed_size: int
    size: int
    header_offset: int


class ApkReader:
    """The zip's central directory, read once; the entries' data on demand. Entries are parsed
    from the directory's bytes when looked for, not kept as objects: their number is the APK's
    to choose."""

    def __init__(self, read_range: ReadRange, file_size: int):
        """Raises DroidheapError when the file is no readable zip, or its directory is larger
        than droidheap reads."""
        self._read_range = read_range
        self._file_size = file_size
        offset, size = self._find_directory()
        self._directory = read_range(offset, size)
        if len(self._directory) != size:
            raise DroidheapError("not a readable zip file (its directory is cut short)")

    def _find_directory(self) -> Tuple[int, int]:
        """The central directory's offset and size, from the end record: the last one whose
        comment ends the file."""
        tail_size = min(self._file_size, _END_RECORD.size + _MAX_COMMENT)
        tail = self._read_range(self._file_size - tail_size, tail_size)
        if tail_size < _END_RECORD.size or len(tail) != tail_size:
            raise DroidheapError("not a readable zip file (no end of central directory record)")
        # Each signature that a whole record can follow, last first.
        end = tail_size - _END_RECORD.size + len(_END_SIGNATURE)
        while (at := tail.rfind(_END_SIGNATURE, 0, end)) >= 0:
            _, size, offset, comment = _END_RECORD.unpack_from(tail, at)
            if at + _END_RECORD.size + comment == tail_size:
                break
            end = at + len(_END_SIGNATURE) - 1
        else:
            raise DroidheapError("not a readable zip file (no end of central directory record)")
        if _ZIP64 in (offset, size):
            raise DroidheapError("not a readable zip file (a zip64 file)")
        if offset > self._file_size or size > self._file_size - offset:
            raise DroidheapError("not a readable zip file (its directory lies past its end)")
        if size > MAX_DIRECTORY_SIZE:
            raise DroidheapError(f"its zip directory is {size} bytes, more than the "
                                 f"{MAX_DIRECTORY_SIZE} droidheap reads")
        return offset, size

    def _entries(self) -> Iterator[_Entry]:
        directory = self._directory
        at = 0
        while at + _DIRECTORY_ENTRY.size <= len(directory):
            (signature, flags, method, compressed_size, size, name_length, extra_length,
             comment_length, header_offset) = _DIRECTORY_ENTRY.unpack_from(directory, at)
            name_at = at + _DIRECTORY_ENTRY.size
            end = name_at + name_length + extra_length + comment_length
            if signature != _DIRECTORY_SIGNATURE or end > len(directory):
                return
            name = directory[name_at:name_at + name_length]
            yield _Entry(name.decode("utf-8" if flags & _UTF8_NAME else "cp437", errors="replace"),
                         method, compressed_size, size, header_offset)
            at = end

    def candidates(self, library: str) -> List[str]:
        """The entries `library` (an entry, or a soname) may be: those under lib/ first."""
        if "/" in library:
            return [library] if any(e.name == library for e in self._entries()) else []
        named = [e.name for e in self._entries() if posixpath.basename(e.name) == library]
        return sorted(named, key=lambda name: not name.startswith("lib/"))

    def stored_entry(self, entry: str) -> bytes:
        """The bytes of `entry`. Raises DroidheapError, saying why, when no linker could have
        mapped it."""
        info = next((e for e in self._entries() if e.name == entry), None)
        if info is None:
            raise DroidheapError(f"no entry {entry}")
        if info.method != _STORED:
            raise DroidheapError(f"{entry} is compressed (no linker maps it from the APK)")
        if info.size != info.compressed_size or info.size > MAX_LIBRARY_SIZE:
            raise DroidheapError(f"{entry} claims {info.size} bytes")
        header = self._read_range(info.header_offset, _LOCAL_HEADER.size)
        if len(header) != _LOCAL_HEADER.size or header[:4] != _LOCAL_SIGNATURE:
            raise DroidheapError(f"{entry} has no local header")
        _, name_length, extra_length = _LOCAL_HEADER.unpack(header)
        start = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
        if start + info.size > self._file_size:
            raise DroidheapError(f"{entry} lies past the end of the file")
        data = self._read_range(start, info.size)
        if len(data) != info.size:
            raise DroidheapError(f"{entry}: read {len(data)} of its {info.size} bytes")
        return data


def read_library(read_range: ReadRange, file_size: int, library: str,
                 build_id: Callable[[bytes], str], wanted: str) -> bytes:
    """The bytes of `library` (an entry or a soname, split_library_path) in the zip of
    `file_size` bytes that `read_range` reads: the entry whose `build_id` is `wanted` (any, when
    `wanted` is ""). Raises DroidheapError, saying why, when there is none."""
    apk = ApkReader(read_range, file_size)
    candidates = apk.candidates(library)
    if not candidates:
        raise DroidheapError(f"no entry {library}")
    mismatched = []
    for entry in candidates:
        data = apk.stored_entry(entry)
        if not wanted or build_id(data) == wanted:
            return data
        mismatched.append(entry)
    raise DroidheapError(f"build id {wanted} is not that of {', '.join(mismatched)}")
