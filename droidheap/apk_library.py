"""A library an app's APK stores, read from the device by its bytes alone.

Android's linker maps an app's native library straight from its APK when the zip stores it
uncompressed and page-aligned; droidheapd then names the mapping as the linker does,
`/data/app/…/base.apk!/lib/arm64-v8a/libfoo.so`. To symbolize it, only that entry's bytes cross
the cable, not the whole APK: the zip's directory and the entry's local header are read through
Python's zipfile over ranges of the remote file (a few small reads), then the entry's data.

The APK is the app's (hostile input): the entry must be stored, its sizes agree and lie inside
the file, and what is read is capped, or the library is refused with the reason.
"""
import io
import struct
import zipfile
from typing import Callable, Optional, Tuple

from droidheap.errors import DroidheapError

SEPARATOR = "!/"
# Larger than any native library an app ships; a bigger "library" is refused, not read.
MAX_LIBRARY_SIZE = 1 << 30
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name length, extra length
_LOCAL_SIGNATURE = b"PK\x03\x04"
_READ_AHEAD = 64 * 1024

ReadRange = Callable[[int, int], bytes]  # (offset, size) -> the bytes there, fewer at the end


def split_library_path(path: str) -> Optional[Tuple[str, str]]:
    """(APK path, entry name) of a library inside an APK, as the linker names one; else None."""
    apk, separator, entry = path.partition(SEPARATOR)
    return (apk, entry) if separator and apk and entry else None


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


def read_stored_entry(read_range: ReadRange, file_size: int, entry: str) -> bytes:
    """The bytes of `entry` of the zip of `file_size` bytes that `read_range` reads. Raises
    DroidheapError, saying why, when it is missing or no linker could have mapped it."""
    remote = _RemoteFile(read_range, file_size)
    try:
        with zipfile.ZipFile(io.BufferedReader(remote, _READ_AHEAD)) as apk:
            info = apk.getinfo(entry)
    except KeyError:
        raise DroidheapError(f"no entry {entry}") from None
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise DroidheapError(f"not a readable zip file ({e})") from None
    if info.compress_type != zipfile.ZIP_STORED:
        raise DroidheapError(f"{entry} is compressed (no linker maps it from the APK)")
    if info.file_size != info.compress_size or info.file_size > MAX_LIBRARY_SIZE:
        raise DroidheapError(f"{entry} claims {info.file_size} bytes")
    header = read_range(info.header_offset, _LOCAL_HEADER.size)
    if len(header) != _LOCAL_HEADER.size or header[:4] != _LOCAL_SIGNATURE:
        raise DroidheapError(f"{entry} has no local header")
    _, name_length, extra_length = _LOCAL_HEADER.unpack(header)
    start = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
    if start + info.file_size > file_size:
        raise DroidheapError(f"{entry} lies past the end of the file")
    data = read_range(start, info.file_size)
    if len(data) != info.file_size:
        raise DroidheapError(f"{entry}: read {len(data)} of its {info.file_size} bytes")
    return data
