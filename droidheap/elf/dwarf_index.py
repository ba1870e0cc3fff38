"""Finding things by address in DWARF `.debug_info`: the compilation unit that holds an address,
and the chain of scopes an address lies in: the function (DW_TAG_subprogram), then the inlined
calls (DW_TAG_inlined_subroutine) inside it.

Each unit is walked at most once, when an address first falls in it; pyelftools parses a DIE in
tens of microseconds, so units no frame reaches are never read.
"""
import bisect
import dataclasses
import struct
from typing import Dict, List, Optional, Tuple

from elftools.dwarf.enums import ENUM_DW_TAG
from elftools.dwarf.ranges import BaseAddressEntry

from droidheap.elf.abbrev_table import AbbreviationCache
from droidheap.elf.die_scan import find_dies

# high_pc is an address in these forms, an offset from low_pc in the others (DWARF 4+).
_ADDRESS_FORMS = {"DW_FORM_addr", "DW_FORM_addrx", "DW_FORM_addrx1", "DW_FORM_addrx2",
                  "DW_FORM_addrx3", "DW_FORM_addrx4"}
_NAME_ATTRIBUTES = ("DW_AT_linkage_name", "DW_AT_MIPS_linkage_name")
_ORIGIN_ATTRIBUTES = ("DW_AT_abstract_origin", "DW_AT_specification")


def die_ranges(dwarf, die, base: int) -> List[Tuple[int, int]]:
    """The [low, high) address ranges a DIE covers; `base` is its unit's low_pc, the base of
    offset-pair range entries until a base address entry says otherwise."""
    attrs = die.attributes
    ranges = []
    if "DW_AT_low_pc" in attrs and "DW_AT_high_pc" in attrs:
        low, high = attrs["DW_AT_low_pc"].value, attrs["DW_AT_high_pc"]
        ranges.append((low, high.value if high.form in _ADDRESS_FORMS else low + high.value))
    lists = dwarf.range_lists() if "DW_AT_ranges" in attrs else None
    entries = lists.get_range_list_at_offset(attrs["DW_AT_ranges"].value, cu=die.cu) \
        if lists is not None else []
    for entry in entries:
        if isinstance(entry, BaseAddressEntry):
            base = entry.base_address
        elif entry.is_absolute:
            ranges.append((entry.begin_offset, entry.end_offset))
        else:
            ranges.append((base + entry.begin_offset, base + entry.end_offset))
    # GCC leaves empty ranges (high_pc 0) for calls optimised away: they hold no address.
    return [r for r in ranges if r[0] < r[1]]


def unit_base(cu) -> int:
    low = cu.get_top_DIE().attributes.get("DW_AT_low_pc")
    return low.value if low is not None else 0


def read_aranges(dwarf) -> List[Tuple[int, int, int]]:
    """(low, high, unit offset) of each `.debug_aranges` entry, by low; [] without the section.
    Read here: pyelftools parses each entry through `construct`."""
    section = dwarf.debug_aranges_sec
    if section is None:
        return []
    section.stream.seek(0)
    data = section.stream.read()
    order = "<" if dwarf.config.little_endian else ">"
    entries = []
    pos = 0
    while pos + 4 <= len(data):
        start = pos
        (length,), pos = struct.unpack_from(order + "I", data, pos), pos + 4
        offset_format = "I"
        if length == 0xFFFFFFFF:
            (length,), pos = struct.unpack_from(order + "Q", data, pos), pos + 8
            offset_format = "Q"
        end = pos + length
        if length < 4 or end > len(data):
            break  # a damaged set: what came before is still good
        unit, address_size, segment_size = struct.unpack_from(
            f"{order}2x{offset_format}BB", data, pos)
        pos += 2 + struct.calcsize(offset_format) + 2
        if address_size not in (4, 8) or segment_size:
            pos = end
            continue
        pair = f"{order}{'II' if address_size == 4 else 'QQ'}"
        tuple_size = 2 * address_size
        pos = start + -(-(pos - start) // tuple_size) * tuple_size  # tuples are aligned to it
        while pos + tuple_size <= end:
            low, size = struct.unpack_from(pair, data, pos)
            pos += tuple_size
            if size:
                entries.append((low, low + size, unit))
        pos = end
    entries.sort()
    return entries


class UnitIndex:
    """Which compilation unit holds an address: `.debug_aranges` when the file has it (GCC), else
    the ranges of each unit's top DIE (clang omits aranges by default)."""

    def __init__(self, dwarf):
        self.dwarf = dwarf
        self._aranges = read_aranges(dwarf)
        self._arange_starts = [entry[0] for entry in self._aranges]
        self._starts: Optional[List[int]] = None
        self._ranges: List[Tuple[int, int, int]] = []  # (low, high, unit offset), by low

    def unit_offset_at(self, address: int) -> Optional[int]:
        i = bisect.bisect_right(self._arange_starts, address) - 1
        if i >= 0 and address < self._aranges[i][1]:
            return self._aranges[i][2]
        if self._starts is None:
            for cu in self.dwarf.iter_CUs():
                for low, high in die_ranges(self.dwarf, cu.get_top_DIE(), unit_base(cu)):
                    self._ranges.append((low, high, cu.cu_offset))
            self._ranges.sort()
            self._starts = [r[0] for r in self._ranges]
        i = bisect.bisect_right(self._starts, address) - 1
        # Unit ranges do not overlap, except for odd producers: look back a little.
        for low, high, offset in reversed(self._ranges[max(0, i - 8):i + 1]):
            if low <= address < high:
                return offset
        return None


@dataclasses.dataclass(frozen=True)
class Scope:
    """A function an address lies in: the function itself, or a call inlined into it and where
    that call was made from."""
    name: str  # the linkage (mangled) name when DWARF has one, else the plain name
    inlined: bool
    call_file: str = ""
    call_line: int = 0
    entry: int = 0  # where the scope begins

# Calls inlined into calls: a few deep, dozens in template-heavy code. Each segment's chain is
# kept whole, so a unit nesting thousands deep (a few KiB of DWARF) would cost their square: a
# unit whose chains hold more than this many scopes per scope range is refused.
MAX_MEAN_DEPTH = 32
# A function or inlined call covers one range, a few where parts of it were moved (cold code).
# Many may name one shared range list, each expanding it again: past this mean, a unit is refused.
MAX_MEAN_RANGES = 8
_SCOPE_TAGS = {"DW_TAG_subprogram": False, "DW_TAG_inlined_subroutine": True}
_SCOPE_TAG_CODES = {ENUM_DW_TAG[tag]: inlined for tag, inlined in _SCOPE_TAGS.items()}


def _die_name(die, hops: int = 0) -> str:
    """The best name of a function DIE, following abstract_origin/specification to the
    declaration: a linkage name (demangled later into a qualified signature) beats a plain one."""
    attrs = die.attributes
    for name in _NAME_ATTRIBUTES:
        if name in attrs:
            return attrs[name].value.decode("utf-8", "replace")
    for origin in _ORIGIN_ATTRIBUTES:
        if origin in attrs and hops < 4:
            found = _die_name(die.get_DIE_from_attribute(origin), hops + 1)
            if found:
                return found
    plain = attrs.get("DW_AT_name")
    return plain.value.decode("utf-8", "replace") if plain is not None else ""


def _scope_dies(dwarf, cu, abbreviations: AbbreviationCache) -> List[Tuple[int, int]]:
    """(offset, depth) of the function and inlined-call DIEs of a unit."""
    stream = dwarf.debug_info_sec.stream
    stream.seek(cu.cu_offset)
    unit = stream.read(cu.size)
    found = find_dies(unit, cu.cu_die_offset - cu.cu_offset,
                      abbreviations.table(cu["debug_abbrev_offset"]), _SCOPE_TAG_CODES,
                      cu["address_size"], 8 if cu.dwarf_format() == 64 else 4, cu["version"])
    return [(cu.cu_offset + position, depth) for position, depth in found]


class _UnitScopes:
    """The function and inlined-call ranges of one unit as elementary segments: for each segment
    start, the chain of DIE offsets (outermost first) covering it. Scope ranges nest or are
    disjoint, so a sweep over their bounds gives every address its chain."""

    def __init__(self, dwarf, cu, files: List[str], first_file: int,
                 abbreviations: AbbreviationCache):
        self.cu, self.files, self.first_file = cu, files, first_file
        base = unit_base(cu)
        scopes = []  # (low, high, depth, offset)
        self._entries: Dict[int, int] = {}
        for count, (offset, depth) in enumerate(_scope_dies(dwarf, cu, abbreviations), 1):
            ranges = die_ranges(dwarf, cu.get_DIE_from_refaddr(offset), base)
            scopes += [(low, high, depth, offset) for low, high in ranges]
            if ranges:  # the first range holds the entry (a cold part is listed later)
                self._entries[offset] = ranges[0][0]
            if len(scopes) > MAX_MEAN_RANGES * (count + 32):
                raise ValueError(f"the functions and inlined calls of its unit at "
                                 f"{cu.cu_offset:#x} cover more than {MAX_MEAN_RANGES} ranges "
                                 "each on average: more than a compiler makes")
        starts: Dict[int, list] = {}
        ends: Dict[int, list] = {}
        for scope in scopes:
            starts.setdefault(scope[0], []).append(scope)
            ends.setdefault(scope[1], []).append(scope)
        active: set = set()
        self.bounds: List[int] = []
        self.chains: List[Tuple[int, ...]] = []
        budget = MAX_MEAN_DEPTH * (len(scopes) + 1)
        for point in sorted(starts.keys() | ends.keys()):
            active.difference_update(ends.get(point, ()))
            active.update(starts.get(point, ()))
            budget -= len(active)
            if budget < 0:
                raise ValueError(f"the inlined calls of its unit at {cu.cu_offset:#x} nest more "
                                 f"than {MAX_MEAN_DEPTH} deep on average: more than a compiler "
                                 "makes")
            self.bounds.append(point)
            self.chains.append(tuple(s[3] for s in sorted(active, key=lambda s: s[2])))
        self._scopes: Dict[int, Scope] = {}

    def scopes_at(self, address: int) -> List[Scope]:
        i = bisect.bisect_right(self.bounds, address) - 1
        return [self._scope(offset) for offset in self.chains[i]] if i >= 0 else []

    def _scope(self, offset: int) -> Scope:
        if offset not in self._scopes:
            die = self.cu.get_DIE_from_refaddr(offset)
            attrs = die.attributes
            file_attr, line_attr = attrs.get("DW_AT_call_file"), attrs.get("DW_AT_call_line")
            index = file_attr.value - self.first_file if file_attr is not None else -1
            self._scopes[offset] = Scope(
                _die_name(die), _SCOPE_TAGS[die.tag],
                self.files[index] if 0 <= index < len(self.files) else "",
                line_attr.value if line_attr is not None else 0, self._entries[offset])
        return self._scopes[offset]


class ScopeIndex:
    """The scopes at an address of one ELF's DWARF, outermost first."""

    def __init__(self, dwarf, abbreviations: AbbreviationCache, units: UnitIndex, file_names):
        """`file_names(cu)` gives the unit's file table and the index of its first entry."""
        self.dwarf, self.units, self.file_names = dwarf, units, file_names
        self._scopes: Dict[int, _UnitScopes] = {}
        self._abbreviations = abbreviations

    def scopes_at(self, address: int) -> List[Scope]:
        offset = self.units.unit_offset_at(address)
        if offset is None:
            return []
        if offset not in self._scopes:
            cu = self.dwarf.get_CU_at(offset)
            self._scopes[offset] = _UnitScopes(self.dwarf, cu, *self.file_names(cu),
                                               self._abbreviations)
        return self._scopes[offset].scopes_at(address)
