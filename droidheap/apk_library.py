"""A library an app's APK stores, read from the device by its bytes alone.

Android's linker maps an app's native library straight from its APK when the zip stores it
uncompressed and page-aligned. droidheapd names the mapping as the linker does,
`/data/app/…/base.apk!/lib/arm64-v8a/libfoo.so` (the zip's entry); the platform's heapprofd (its
libunwindstack) as tombstones do, `/data/app/…/base.apk!libfoo.so` (the library's soname, which
the NDK makes its file name). To symbolize it, only that entry's bytes cross the cable, not the
whole APK: the zip's directory and the entry's local header are read through Python's zipfile
over ranges of the remote file (a few small reads), then the entry's data. A soname is looked
for among the entries of that file name, the build id telling the ABIs' copies apart.

The APK is the app's (hostile input): the entry must be stored, its sizes agree and lie inside
the file, and what is read is capped, or the library is refused with the reason.
"""
import io
import posixpath
import struct
import zipfile
from typing import Callable, List, Optional, Tuple

from droidheap.errors import DroidheapError

SEPARATOR = "!/"
# Larger than any native library an app ships; a bigger "library" is refused, not read.
MAX_LIBRARY_SIZE = 1 << 30
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name length, extra length
_LOCAL_SIGNATURE = b"PK\x03\x04"
_READ_AHEAD = 64 * 1024

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


class _RemoteFile(io.RawIOBase):
    """A read-only, seekable view of a remote file for zipfile: each read asks for at least
    _READ_AHEAD bytes, so that zipfile's many small reads cost a few round trips."""

    def __init__(self, read_range: ReadRange, size: int):
        super().__init__()
        self._read_range = read_range
        self._size = size
        self._position = 0
        self._cached_at = 0
        self._cached = b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer) -> int:
        wanted = min(len(buffer), max(0, self._size - self._position))
        end = self._position + wanted
        if not (self._cached_at <= self._position and end <= self._cached_at + len(self._cached)):
            self._cached_at = self._position
            self._cached = self._read_range(self._position, max(wanted, _READ_AHEAD))
        data = self._cached[self._position - self._cached_at:end - self._cached_at]
        buffer[:len(data)] = data
        self._position += len(data)
        return len(data)


class ApkReader:
    """The zip's directory, read once; the entries' data on demand."""

    def __init__(self, read_range: ReadRange, file_size: int):
        """Raises DroidheapError when the file is no readable zip."""
        self._read_range = read_range
        self._file_size = file_size
        try:
            with zipfile.ZipFile(io.BufferedReader(_RemoteFile(read_range, file_size),
                                                   _READ_AHEAD)) as apk:
                self._entries = {info.filename: info for info in apk.infolist()}
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
            raise DroidheapError(f"not a readable zip file ({e})") from None

    def candidates(self, library: str) -> List[str]:
        """The entries `library` (an entry, or a soname) may be: those under lib/ first."""
        if "/" in library:
            return [library] if library in self._entries else []
        named = [name for name in self._entries if posixpath.basename(name) == library]
        return sorted(named, key=lambda name: not name.startswith("lib/"))

    def stored_entry(self, entry: str) -> bytes:
        """The bytes of `entry`. Raises DroidheapError, saying why, when no linker could have
        mapped it."""
        info = self._entries[entry]
        if info.compress_type != zipfile.ZIP_STORED:
            raise DroidheapError(f"{entry} is compressed (no linker maps it from the APK)")
        if info.file_size != info.compress_size or info.file_size > MAX_LIBRARY_SIZE:
            raise DroidheapError(f"{entry} claims {info.file_size} bytes")
        header = self._read_range(info.header_offset, _LOCAL_HEADER.size)
        if len(header) != _LOCAL_HEADER.size or header[:4] != _LOCAL_SIGNATURE:
            raise DroidheapError(f"{entry} has no local header")
        _, name_length, extra_length = _LOCAL_HEADER.unpack(header)
        start = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
        if start + info.file_size > self._file_size:
            raise DroidheapError(f"{entry} lies past the end of the file")
        data = self._read_range(start, info.file_size)
        if len(data) != info.file_size:
            raise DroidheapError(f"{entry}: read {len(data)} of its {info.file_size} bytes")
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
