"""A bionic property area: the file at /dev/__properties__ every Android program maps read-only
and reads its system properties from (bionic's libc/system_properties/, Android 10's format: read
there for the layout, nothing copied). One file holds every property, as bionic reads a plain file
at that path (a directory would be split by SELinux context; nothing here has contexts).

Layout: a 128-byte header (bytes used, a serial bumped on every change, magic, version), then a
trie in the data area. Offsets are from the data area's start. Each name is split at its dots;
each part is a node (`prop_bt`) with the offsets of its property, of its left and right siblings
(a binary search tree ordered by length, then bytes) and of its first child (the next part's
tree). A property (`prop_info`) holds a serial (value length << 24, a change counter, a dirty
bit while it is rewritten), a 92-byte value and the full name; a longer value (only for ro.*, as
init allows) is stored elsewhere in the area and the property says where.

Written only by its owner (the test adbd's property service), one change at a time, following
bionic's writer protocol, so that running programs see whole values; readers are bionic's own.
"""
import ctypes
import mmap
import os
import pathlib
import struct
from typing import Dict, Iterator, Optional, Tuple

AREA_SIZE = 128 * 1024  # bionic's PA_SIZE
PROP_VALUE_MAX = 92
_MAGIC = 0x504F5250
_VERSION = 0xFC6ED0AB
_HEADER = struct.Struct("<IIII112x")  # bytes_used, serial, magic, version, reserved
_NODE = struct.Struct("<IIIII")  # namelen, prop, left, right, children (then the name, NUL)
_NODE_PROP, _NODE_LEFT, _NODE_RIGHT, _NODE_CHILDREN = 4, 8, 12, 16  # field offsets in a node
_INFO_SIZE = 4 + PROP_VALUE_MAX  # serial, value (then the name, NUL)
_LONG_FLAG = 1 << 16
_LONG_ERROR = b"Must use __system_property_read_callback() to read"
_LONG_OFFSET_AT = 4 + 56  # in a long property: after the serial and the error message
_SERIAL_AT = 4  # in the header

_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(os.uname().machine)
_FUTEX_WAKE = 1
_libc = ctypes.CDLL(None, use_errno=True)


class AreaFull(ValueError):
    pass


def _align4(n: int) -> int:
    return (n + 3) & ~3


def _compare(a: bytes, b: bytes) -> int:
    """bionic's order of sibling names: shorter first, then bytewise."""
    if len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    return (a > b) - (a < b)


class PropertyArea:
    """The area file at `path`, created empty (root-owned, 0644: bionic refuses a file anyone
    else may write) and kept mapped read-write here."""

    def __init__(self, path: pathlib.Path):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.fchown(fd, 0, 0)
            os.fchmod(fd, 0o644)
            os.ftruncate(fd, AREA_SIZE)
            self._map = mmap.mmap(fd, AREA_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._data = _HEADER.size
        # The root node (an empty name) is the first object, as bionic's constructor makes it.
        _HEADER.pack_into(self._map, 0, _NODE.size, 0, _MAGIC, _VERSION)
        self._nodes: Dict[str, int] = {}  # full name -> its prop_info's offset

    # -- reading

    def read(self) -> Dict[str, str]:
        return dict(self.items())

    def write(self, updates: Dict[str, str]) -> None:
        for name, value in updates.items():
            self.set(name, value)

    def get(self, name: str) -> Optional[str]:
        info = self._nodes.get(name)
        return None if info is None else self._value(info)

    def items(self) -> Iterator[Tuple[str, str]]:
        for name, info in self._nodes.items():
            yield name, self._value(info)

    def _value(self, info: int) -> str:
        at = self._data + info
        serial = self._u32(at)
        if serial & _LONG_FLAG:
            start = at + self._u32(at + _LONG_OFFSET_AT)
            end = self._map.find(b"\0", start)
        else:
            start, end = at + 4, at + 4 + (serial >> 24)
        return self._map[start:end].decode(errors="replace")

    # -- writing

    def set(self, name: str, value: str) -> None:
        """Adds or changes one property. Raises AreaFull, or ValueError for a long value of a
        property that exists (bionic cannot change one in place)."""
        encoded_name, encoded = name.encode(), value.encode()
        info = self._nodes.get(name)
        if info is None:
            self._nodes[name] = self._add(encoded_name, encoded)
        elif len(encoded) >= PROP_VALUE_MAX or self._u32(self._data + info) & _LONG_FLAG:
            raise ValueError(f"{name}: a value of {PROP_VALUE_MAX} bytes or more is set only once")
        else:
            self._update(info, encoded)
        self._bump(_SERIAL_AT)  # the area's serial: something changed

    def close(self) -> None:
        self._map.close()

    def _update(self, info: int, value: bytes) -> None:
        # bionic's writer protocol: mark the property dirty (readers wait or retry), write the
        # value, then publish the new length with the counter moved on, and wake the waiters.
        at = self._data + info
        serial = self._u32(at) | 1
        self._put32(at, serial)
        self._map[at + 4:at + 4 + PROP_VALUE_MAX] = value.ljust(PROP_VALUE_MAX, b"\0")
        self._put32(at, (len(value) << 24) | ((serial + 1) & 0xFFFFFF))
        self._wake(at)

    def _bump(self, at: int) -> None:
        self._put32(at, (self._u32(at) + 1) & 0xFFFFFFFF)
        self._wake(at)

    def _add(self, name: bytes, value: bytes) -> int:
        node = 0  # the root
        for part in name.split(b"."):
            if not part:
                raise ValueError(f"{name.decode(errors='replace')}: an empty part in the name")
            node = self._child(node, part)
        prop_field = self._data + node + _NODE_PROP
        info = self._allocate(_INFO_SIZE + len(name) + 1)
        at = self._data + info
        self._map[at + _INFO_SIZE:at + _INFO_SIZE + len(name)] = name
        if len(value) >= PROP_VALUE_MAX:
            long_at = self._allocate(len(value) + 1)
            self._map[self._data + long_at:self._data + long_at + len(value)] = value
            self._map[at + 4:at + 4 + len(_LONG_ERROR)] = _LONG_ERROR
            self._put32(at + _LONG_OFFSET_AT, long_at - info)
            self._put32(at, (len(_LONG_ERROR) << 24) | _LONG_FLAG)
        else:
            self._map[at + 4:at + 4 + len(value)] = value
            self._put32(at, len(value) << 24)
        self._put32(prop_field, info)  # published last, as a reader may look at any moment
        return info

    def _child(self, node: int, part: bytes) -> int:
        """The node for `part` under `node`, made if missing."""
        field = self._data + node + _NODE_CHILDREN
        while True:
            current = self._u32(field)
            if current == 0:
                made = self._new_node(part)
                self._put32(field, made)
                return made
            order = _compare(part, self._node_name(current))
            if order == 0:
                return current
            field = self._data + current + (_NODE_LEFT if order < 0 else _NODE_RIGHT)

    def _node_name(self, node: int) -> bytes:
        at = self._data + node
        length = self._u32(at)
        return self._map[at + _NODE.size:at + _NODE.size + length]

    def _new_node(self, part: bytes) -> int:
        node = self._allocate(_NODE.size + len(part) + 1)
        at = self._data + node
        _NODE.pack_into(self._map, at, len(part), 0, 0, 0, 0)
        self._map[at + _NODE.size:at + _NODE.size + len(part)] = part
        return node

    def _allocate(self, size: int) -> int:
        used = self._u32(0)
        aligned = _align4(size)
        if used + aligned > AREA_SIZE - _HEADER.size:
            raise AreaFull(f"the property area is full ({used} bytes used)")
        self._put32(0, used + aligned)
        return used

    def _u32(self, at: int) -> int:
        return struct.unpack_from("<I", self._map, at)[0]

    def _put32(self, at: int, value: int) -> None:
        struct.pack_into("<I", self._map, at, value)

    def _wake(self, at: int) -> None:
        """Wakes every reader waiting on the word at `at` (a shared file mapping: the futex is
        the file's, whichever process maps it)."""
        if _SYS_FUTEX is None:
            return
        address = ctypes.addressof(ctypes.c_char.from_buffer(self._map, at))
        _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(address), _FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)
