"""Why a program droidheap started never connected, as its ELF file tells: droidheap's client
sees the calls that reach the allocator front (bionic's libc, droidheap's preloaded library), and
a program that is statically linked, or that carries a malloc of its own (an allocator linked in,
a sanitizer's runtime as clang links it), makes none; and the client stays out of a process that
AddressSanitizer checks (client/profileable_process.cc says why). This names the cause for the
user.

The file is read through the device (Device.read_range), in blocks each fetched once: on an adb
device a block is a round trip, and the few parts read (headers, the dynamic section, the symbol
hash table and its entries) take a handful."""
import io
import re
from typing import TYPE_CHECKING, Callable, Dict, Optional

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from droidheap.errors import DroidheapError

if TYPE_CHECKING:  # the device package uses ASAN_AFTER_PRELOAD and asan_options
    from droidheap.device.base import Device

# The sanitizers whose runtime carries a malloc: the runtime's name (its __<name>_init marks it in
# a program, lib<name>.so or libclang_rt.<name>-<arch>.so is it as a library), the sanitizer's,
# the -fsanitize= value that builds it in, and whether the client stays out of it.
_SANITIZERS = [("asan", "AddressSanitizer", "address", True),
               ("hwasan", "HWAddressSanitizer", "hwaddress", True),
               ("tsan", "ThreadSanitizer", "thread", False),
               ("msan", "MemorySanitizer", "memory", False),
               ("lsan", "LeakSanitizer", "leak", False)]
_RUNTIME_LIBRARY = re.compile(r"lib(?:clang_rt\.)?(asan|hwasan|tsan|msan|lsan)[.-]")
_BLOCK = 64 << 10
# What one diagnosis may read: an ELF file whose parts lie further apart is not worth the wait.
_MAX_BLOCKS = 64

ReadRange = Callable[[int, int], bytes]  # (offset, size) -> the bytes there, fewer at the end


class _BlockReader(io.RawIOBase):
    """A file of `size` bytes read through `read_range` in blocks, each fetched once."""

    def __init__(self, read_range: ReadRange, size: int):
        super().__init__()
        self._read_range = read_range
        self._size = size
        self._position = 0
        self._blocks: Dict[int, bytes] = {}

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(base + offset, 0)
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer) -> int:
        wanted = min(len(buffer), max(self._size - self._position, 0))
        done = 0
        while done < wanted:
            index, skip = divmod(self._position + done, _BLOCK)
            block = self._block(index)[skip:skip + wanted - done]
            if not block:
                break
            buffer[done:done + len(block)] = block
            done += len(block)
        self._position += done
        return done

    def _block(self, index: int) -> bytes:
        if index not in self._blocks:
            if len(self._blocks) >= _MAX_BLOCKS:
                raise ValueError("reads too much of the file")
            self._blocks[index] = self._read_range(index * _BLOCK, _BLOCK)
        return self._blocks[index]


def _defines(dynamic, name: str) -> bool:
    found = dynamic.get_symbol_by_name(name) or []
    return any(symbol["st_shndx"] != "SHN_UNDEF" for symbol in found)


def unseen_allocations(read_range: ReadRange, size: int) -> Optional[str]:
    """Why the ELF file that `read_range` reads keeps its allocations from droidheap; None when
    nothing in it does (or it is no ELF file that can be read)."""
    try:
        elf = ELFFile(_BlockReader(read_range, size))
        segments = list(elf.iter_segments())
        types = {segment.header.p_type for segment in segments}
        if elf.header.e_type not in ("ET_EXEC", "ET_DYN") or "PT_LOAD" not in types:
            return None  # nothing a program runs as
        if "PT_INTERP" not in types:
            return "statically linked: no library can take its calls to malloc"
        dynamic = next((s for s in segments if s.header.p_type == "PT_DYNAMIC"), None)
        if dynamic is None:
            return None
        loaded = {match.group(1) for tag in dynamic.iter_tags("DT_NEEDED")
                  for match in [_RUNTIME_LIBRARY.match(tag.needed)] if match}
        own_malloc = _defines(dynamic, "malloc")
        for runtime, sanitizer, flag, stays_out in _SANITIZERS:
            if runtime in loaded or _defines(dynamic, f"__{runtime}_init"):
                if stays_out:
                    return (f"built with {sanitizer}, which checks every memory access, the "
                            f"profiler's too: profile a build without -fsanitize={flag}")
                if own_malloc:
                    return (f"built with {sanitizer}, whose malloc, linked into it, takes every "
                            f"call: profile a build without -fsanitize={flag}")
        if own_malloc:
            return "its malloc is its own, an allocator linked into it, which takes every call"
        return None
    except (ELFError, ValueError, KeyError, OSError, DroidheapError):
        return None


def why_never_connected(device: "Device", program: str) -> str:
    """What to tell a user whose program `program` (as started: a path, or a name the device's
    PATH finds) never connected to droidheapd."""
    path = device.program_path(program)
    try:
        size = device.file_size(path) if path else 0
    except DroidheapError:
        size = 0
    if not size:
        return "statically linked, or no allocation at all?"
    reason = unseen_allocations(lambda offset, count: device.read_range(path, offset, count), size)
    return reason or "no allocation at all?"


# ASAN_OPTIONS for programs that droidheap's library precedes in LD_PRELOAD: AddressSanitizer's
# runtime, when the program loads it as a library (gcc's -fsanitize=address), refuses to start
# unless it is first. The program then runs as it would alone (unprofiled: the client stays out
# of it). First, so that a user's own setting of it wins.
ASAN_AFTER_PRELOAD = "verify_asan_link_order=0"


def asan_options(existing: Optional[str]) -> str:
    """ASAN_OPTIONS for a program started with droidheap's preloaded library, from its own."""
    return f"{ASAN_AFTER_PRELOAD}:{existing}" if existing else ASAN_AFTER_PRELOAD
