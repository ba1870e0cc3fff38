"""Finding things by address in DWARF `.debug_info`: the compilation unit that holds an address,
and the chain of scopes an address lies in: the function (DW_TAG_subprogram), then the inlined
calls (DW_TAG_inlined_subroutine) inside it.

Each unit is walked at most once, when an address first falls in it, and only its function and
inlined-call DIEs are read (die_scan.py), their ranges and names resolved here (dwarf_unit.py,
range_lists.py): pyelftools took tens of microseconds a DIE, 2 s for the 40,000 function and
inlined-call DIEs in the 59 units of libpython3.11 that a Python program's stacks reached.
"""
import bisect
import dataclasses
import operator
import struct
from typing import Callable, Dict, List, Optional, Tuple

from droidheap.elf.die_scan import Values, find_dies
from droidheap.elf.dwarf_unit import AT_HIGH_PC, AT_LOW_PC, AT_RANGES, DebugInfo, Unit
from droidheap.elf.range_lists import die_ranges

_AT_NAME, _AT_CALL_FILE, _AT_CALL_LINE = 0x03, 0x58, 0x59
_NAME_ATTRIBUTES = (0x6E, 0x2007)  # DW_AT_linkage_name, DW_AT_MIPS_linkage_name
_ORIGIN_ATTRIBUTES = (0x31, 0x47)  # DW_AT_abstract_origin, DW_AT_specification
_RANGE_ATTRIBUTES = {AT_LOW_PC, AT_HIGH_PC, AT_RANGES}


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

    def __init__(self, info: DebugInfo, aranges: List[Tuple[int, int, int]]):
        """`aranges`: read_aranges() of the file."""
        self.info = info
        self._aranges = aranges
        self._arange_starts = [entry[0] for entry in self._aranges]
        self._starts: Optional[List[int]] = None
        self._ranges: List[Tuple[int, int, int]] = []  # (low, high, unit offset), by low

    def unit_offset_at(self, address: int) -> Optional[int]:
        i = bisect.bisect_right(self._arange_starts, address) - 1
        if i >= 0 and address < self._aranges[i][1]:
            return self._aranges[i][2]
        if self._starts is None:
            for unit in self.info.units():
                for low, high in die_ranges(unit, unit.top, unit.low_pc):
                    self._ranges.append((low, high, unit.offset))
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
_SCOPE_TAGS = {0x2E: False, 0x1D: True}  # DW_TAG_subprogram, DW_TAG_inlined_subroutine: inlined
_DEPTH, _OFFSET = operator.itemgetter(2), operator.itemgetter(3)  # of (low, high, depth, offset)


def die_name(unit: Unit, values: Values, hops: int = 0) -> str:
    """The best name of a function DIE, following abstract_origin/specification to the
    declaration: a linkage name (demangled later into a qualified signature) beats a plain one."""
    for attribute in _NAME_ATTRIBUTES:
        if attribute in values:
            return unit.string(*values[attribute]).decode("utf-8", "replace")
    for attribute in _ORIGIN_ATTRIBUTES:
        if attribute in values and hops < 4:
            found = die_name(*unit.referenced(*values[attribute]), hops + 1)
            if found:
                return found
    plain = values.get(_AT_NAME)
    return unit.string(*plain).decode("utf-8", "replace") if plain is not None else ""


class _UnitScopes:
    """The function and inlined-call ranges of one unit as elementary segments: for each segment
    start, the chain of DIE offsets (outermost first) covering it. Scope ranges nest or are
    disjoint, so a sweep over their bounds gives every address its chain."""

    def __init__(self, unit: Unit, files: List[str], first_file: int):
        self.unit, self.files, self.first_file = unit, files, first_file
        base = unit.low_pc
        scopes = []  # (low, high, depth, offset)
        self._entries: Dict[int, int] = {}
        found = find_dies(unit.data, unit.first_die, unit.end, unit.abbreviations, _SCOPE_TAGS,
                          _RANGE_ATTRIBUTES, unit.sizes, unit.info.byteorder)
        for count, (offset, depth, values) in enumerate(found, 1):
            ranges = die_ranges(unit, values, base)
            scopes += [(low, high, depth, offset) for low, high in ranges]
            if ranges:  # the first range holds the entry (a cold part is listed later)
                self._entries[offset] = ranges[0][0]
            if len(scopes) > MAX_MEAN_RANGES * (count + 32):
                raise ValueError(f"the functions and inlined calls of its unit at "
                                 f"{unit.offset:#x} cover more than {MAX_MEAN_RANGES} ranges "
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
                raise ValueError(f"the inlined calls of its unit at {unit.offset:#x} nest more "
                                 f"than {MAX_MEAN_DEPTH} deep on average: more than a compiler "
                                 "makes")
            self.bounds.append(point)
            self.chains.append(tuple(map(_OFFSET, sorted(active, key=_DEPTH))))
        self._scopes: Dict[int, Scope] = {}

    def scopes_at(self, address: int) -> List[Scope]:
        i = bisect.bisect_right(self.bounds, address) - 1
        return [self._scope(offset) for offset in self.chains[i]] if i >= 0 else []

    def _scope(self, offset: int) -> Scope:
        if offset not in self._scopes:
            tag, values = self.unit.attributes(offset)
            file_attr, line_attr = values.get(_AT_CALL_FILE), values.get(_AT_CALL_LINE)
            index = file_attr[1] - self.first_file if file_attr is not None else -1
            self._scopes[offset] = Scope(
                die_name(self.unit, values), _SCOPE_TAGS[tag],
                self.files[index] if 0 <= index < len(self.files) else "",
                line_attr[1] if line_attr is not None else 0, self._entries[offset])
        return self._scopes[offset]


class ScopeIndex:
    """The scopes at an address of one ELF's DWARF, outermost first."""

    def __init__(self, info: DebugInfo, units: UnitIndex,
                 file_names: Callable[[int], Tuple[List[str], int]]):
        """`file_names(offset)` gives the file table of the unit at `offset` and the index of its
        first entry."""
        self.info, self.units, self.file_names = info, units, file_names
        self._scopes: Dict[int, _UnitScopes] = {}

    def scopes_at(self, address: int) -> List[Scope]:
        offset = self.units.unit_offset_at(address)
        if offset is None:
            return []
        if offset not in self._scopes:
            self._scopes[offset] = _UnitScopes(self.info.unit_at(offset),
                                               *self.file_names(offset))
        return self._scopes[offset].scopes_at(address)
