"""The units of `.debug_info` read here: their headers, the attributes of a DIE at an offset, and
what those attributes name elsewhere (strings, addresses by index, range lists by index, other
DIEs), as pyelftools would resolve them but without building its DIE objects.
"""
import bisect
import struct
from typing import Dict, List, Optional, Tuple

from droidheap.elf.abbrev_table import AbbreviationCache
from droidheap.elf.die_scan import Values, form_sizes, read_die

AT_LOW_PC, AT_HIGH_PC, AT_RANGES = 0x11, 0x12, 0x55
_AT_STR_OFFSETS_BASE, _AT_ADDR_BASE, _AT_RNGLISTS_BASE = 0x72, 0x73, 0x74
_STRX = {0x1A, 0x25, 0x26, 0x27, 0x28}  # strx, strx1..4
ADDRX = {0x1B, 0x29, 0x2A, 0x2B, 0x2C}  # addrx, addrx1..4
_FORM_STRING, _FORM_STRP, _FORM_LINE_STRP, _FORM_REF_ADDR = 0x08, 0x0E, 0x1F, 0x10
_FORM_RNGLISTX = 0x23
_UNIT_REFERENCES = {0x11, 0x12, 0x13, 0x14, 0x15}  # ref1, ref2, ref4, ref8, ref_udata
_UT_SKELETON, _UT_SPLIT_COMPILE, _UT_TYPE, _UT_SPLIT_TYPE = 4, 5, 2, 6


def _section(section) -> bytes:
    """The bytes of a pyelftools DWARF section (inflated, if it was compressed; not copied: its
    stream's own), b"" without."""
    return section.stream.getvalue() if section is not None else b""


class DebugInfo:
    """The units of one file's `.debug_info`, each read when first asked for, and the sections
    their attributes point into. Made from pyelftools' DWARFInfo (which inflated what was
    compressed) and owned by the ElfFile; a file without .debug_info has no units."""

    def __init__(self, dwarf, abbreviations: Optional[AbbreviationCache]):
        self.info = _section(dwarf.debug_info_sec)
        self.strings = _section(dwarf.debug_str_sec)
        self.line_strings = _section(dwarf.debug_line_str_sec)
        self.string_offsets = _section(dwarf.debug_str_offsets_sec)
        self.addresses = _section(dwarf.debug_addr_sec)
        # None without the section: which of the two a file has decides how lists are read.
        self.ranges = _section(dwarf.debug_ranges_sec) \
            if dwarf.debug_ranges_sec is not None else None
        self.range_lists = _section(dwarf.debug_rnglists_sec) \
            if dwarf.debug_rnglists_sec is not None else None
        self.byteorder = "little" if dwarf.config.little_endian else "big"
        self.abbreviations = abbreviations
        self._units: Dict[int, Unit] = {}
        self._offsets: Optional[List[int]] = None

    def unit_at(self, offset: int) -> "Unit":
        """The unit whose header starts at `offset`."""
        if offset not in self._units:
            self._units[offset] = Unit(self, offset)
        return self._units[offset]

    def offsets(self) -> List[int]:
        """The offset of every unit, in order; a damaged length ends the list."""
        if self._offsets is None:
            self._offsets = []
            pos, order = 0, "<" if self.byteorder == "little" else ">"
            while pos + 4 <= len(self.info):
                length, = struct.unpack_from(order + "I", self.info, pos)
                size = 4
                if length == 0xFFFFFFFF and pos + 12 <= len(self.info):
                    length, = struct.unpack_from(order + "Q", self.info, pos + 4)
                    size = 12
                if length == 0 or pos + size + length > len(self.info):
                    break
                self._offsets.append(pos)
                pos += size + length
        return self._offsets

    def units(self) -> List["Unit"]:
        return [self.unit_at(offset) for offset in self.offsets()]

    def unit_holding(self, offset: int) -> "Unit":
        """The unit a DIE at `offset` (a DW_FORM_ref_addr) lies in."""
        offsets = self.offsets()
        i = bisect.bisect_right(offsets, offset) - 1
        if i < 0:
            raise ValueError(f"no unit holds .debug_info offset {offset:#x}")
        return self.unit_at(offsets[i])


def _c_string(data: bytes, offset: int, section: str) -> bytes:
    end = data.find(b"\0", offset)
    if not 0 <= offset < len(data) or end < 0:
        raise ValueError(f"a string at {offset:#x} lies outside {section}")
    return data[offset:end]


class Unit:
    """One unit of `.debug_info`: its header, its bytes, and its DIEs' attributes. Made and
    cached by DebugInfo."""

    def __init__(self, info: DebugInfo, offset: int):
        self.info, self.offset = info, offset
        order = "<" if info.byteorder == "little" else ">"
        data = info.info
        try:
            length, = struct.unpack_from(order + "I", data, offset)
            pos, self.offset_size = offset + 4, 4
            if length == 0xFFFFFFFF:
                length, = struct.unpack_from(order + "Q", data, pos)
                pos, self.offset_size = pos + 8, 8
            end = pos + length
            offset_format = order + ("I" if self.offset_size == 4 else "Q")
            self.version, = struct.unpack_from(order + "H", data, pos)
            pos += 2
            if self.version >= 5:
                unit_type, self.address_size = data[pos], data[pos + 1]
                abbrev_offset, = struct.unpack_from(offset_format, data, pos + 2)
                pos += 2 + self.offset_size
                if unit_type in (_UT_SKELETON, _UT_SPLIT_COMPILE):
                    pos += 8  # dwo_id
                elif unit_type in (_UT_TYPE, _UT_SPLIT_TYPE):
                    pos += 8 + self.offset_size  # type_signature, type_offset
            else:
                abbrev_offset, = struct.unpack_from(offset_format, data, pos)
                self.address_size = data[pos + self.offset_size]
                pos += self.offset_size + 1
        except (struct.error, IndexError):
            raise ValueError(f"the unit at {offset:#x} is cut short") from None
        if not 2 <= self.version <= 5 or self.address_size not in (2, 4, 8) \
                or end > len(data) or pos > end:
            raise ValueError(f"the unit at {offset:#x} has a header no compiler writes")
        # Its DIEs lie in `data` (the whole section, not a copy) from first_die to end.
        self.data, self.first_die, self.end = data, pos, end
        self.sizes = form_sizes(self.address_size, self.offset_size, self.version)
        if info.abbreviations is None:
            raise ValueError("its DWARF has units but no .debug_abbrev")
        self.abbreviations = info.abbreviations.table(abbrev_offset)
        self._top: Optional[Values] = None

    @property
    def top(self) -> Values:
        """The attributes of the unit's own DIE (DW_TAG_compile_unit)."""
        if self._top is None:
            self._top = self.attributes(self.first_die)[1]
        return self._top

    def attributes(self, offset: int) -> Tuple[int, Values]:
        """The tag and attributes of the DIE at .debug_info offset `offset`, in this unit."""
        if not self.first_die <= offset < self.end:
            raise ValueError(f"no DIE of the unit at {self.offset:#x} is at {offset:#x}")
        return read_die(self.data, offset, self.abbreviations, self.sizes, self.info.byteorder)

    def _base(self, attribute: int, name: str) -> int:
        found = self.top.get(attribute)
        if found is None:
            raise ValueError(f"the unit at {self.offset:#x} needs {name}")
        return found[1]

    def _entry(self, data: bytes, base: int, index: int, size: int) -> int:
        """Entry `index` of a table of `size`-byte numbers at `base` of a section."""
        at = base + index * size
        if at + size > len(data):
            raise ValueError(f"the unit at {self.offset:#x} names entry {index} past the end of "
                             "its table")
        return int.from_bytes(data[at:at + size], self.info.byteorder)

    def string(self, form: int, value) -> bytes:
        if form == _FORM_STRING:
            return value
        if form == _FORM_STRP:
            return _c_string(self.info.strings, value, ".debug_str")
        if form == _FORM_LINE_STRP:
            return _c_string(self.info.line_strings, value, ".debug_line_str")
        if form in _STRX:
            base = self._base(_AT_STR_OFFSETS_BASE, "DW_AT_str_offsets_base")
            offset = self._entry(self.info.string_offsets, base, value, self.offset_size)
            return _c_string(self.info.strings, offset, ".debug_str")
        raise ValueError(f"a name in form {form:#x}, which names no string this file holds")

    def address(self, form: int, value: int) -> int:
        return self.indexed_address(value) if form in ADDRX else value

    def indexed_address(self, index: int) -> int:
        """Entry `index` of the unit's table in .debug_addr."""
        base = self._base(_AT_ADDR_BASE, "DW_AT_addr_base")
        return self._entry(self.info.addresses, base, index, self.address_size)

    def range_list_offset(self, form: int, value: int) -> int:
        """Where in .debug_ranges or .debug_rnglists a DW_AT_ranges value points."""
        if form == _FORM_RNGLISTX:
            base = self._base(_AT_RNGLISTS_BASE, "DW_AT_rnglists_base")
            return base + self._entry(self.info.range_lists or b"", base, value,
                                      self.offset_size)
        return value

    def referenced(self, form: int, value: int) -> Tuple["Unit", Values]:
        """The unit and the attributes of the DIE a reference attribute names."""
        if form in _UNIT_REFERENCES:
            unit, offset = self, self.offset + value
        elif form == _FORM_REF_ADDR:
            unit, offset = self.info.unit_holding(value), value
        else:
            raise ValueError(f"a reference in form {form:#x}, to a DIE outside this file")
        return unit, unit.attributes(offset)[1]

    @property
    def low_pc(self) -> int:
        """The unit's base address: the default base of its range lists."""
        low = self.top.get(AT_LOW_PC)
        return self.address(*low) if low is not None else 0
