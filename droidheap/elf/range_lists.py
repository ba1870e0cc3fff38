"""The address ranges a DIE covers: its low_pc and high_pc, and the range list DW_AT_ranges
names, in `.debug_ranges` (DWARF 2-4) or `.debug_rnglists` (DWARF 5), read here.

pyelftools parses each range list entry through `construct`: a big library's functions and
inlined calls name thousands of lists.
"""
from typing import List, Tuple

from droidheap.elf.die_scan import Values
from droidheap.elf.dwarf_unit import ADDRX, AT_HIGH_PC, AT_LOW_PC, AT_RANGES, Unit
from droidheap.elf.line_table import uleb

_FORM_ADDR = 0x01
# DW_RLE_*: the kinds of .debug_rnglists entries.
(_END_OF_LIST, _BASE_ADDRESSX, _STARTX_ENDX, _STARTX_LENGTH, _OFFSET_PAIR, _BASE_ADDRESS,
 _START_END, _START_LENGTH) = range(8)


def die_ranges(unit: Unit, values: Values, base: int) -> List[Tuple[int, int]]:
    """The [low, high) address ranges of a DIE of `unit` with attributes `values`; `base` is
    the unit's low_pc, the base of the entries of its range list until one says otherwise."""
    ranges = []
    low, high = values.get(AT_LOW_PC), values.get(AT_HIGH_PC)
    if low is not None and high is not None:
        start = unit.address(*low)
        # high_pc is an address in these forms, an offset from low_pc in the others (DWARF 4+).
        address = high[0] == _FORM_ADDR or high[0] in ADDRX
        ranges.append((start, unit.address(*high) if address else start + high[1]))
    listed = values.get(AT_RANGES)
    if listed is not None:
        ranges += _range_list(unit, unit.range_list_offset(*listed), base)
    # GCC leaves empty ranges (high_pc 0) for calls optimised away: they hold no address.
    return [r for r in ranges if r[0] < r[1]]


def _range_list(unit: Unit, offset: int, base: int) -> List[Tuple[int, int]]:
    """The ranges of the list at `offset`. As pyelftools chooses: the section a file has, and
    with both, .debug_rnglists for DWARF 5 units; none without either."""
    info = unit.info
    if info.range_lists is not None and (unit.version >= 5 or info.ranges is None):
        return _rnglists(unit, info.range_lists, offset, base)
    if info.ranges is not None:
        return _ranges(unit, info.ranges, offset, base)
    return []


def _ranges(unit: Unit, data: bytes, pos: int, base: int) -> List[Tuple[int, int]]:
    """A .debug_ranges list: (begin, end) pairs relative to the base, a begin of all ones sets
    the base to its end, (0, 0) ends the list."""
    size, order = unit.address_size, unit.info.byteorder
    selects_base = (1 << 8 * size) - 1
    ranges = []
    while True:
        if pos < 0 or pos + 2 * size > len(data):
            raise ValueError(f"a range list of the unit at {unit.offset:#x} runs past the end "
                             "of .debug_ranges")
        begin = int.from_bytes(data[pos:pos + size], order)
        end = int.from_bytes(data[pos + size:pos + 2 * size], order)
        pos += 2 * size
        if begin == 0 and end == 0:
            return ranges
        if begin == selects_base:
            base = end
        else:
            ranges.append((base + begin, base + end))


def _rnglists(unit: Unit, data: bytes, pos: int, base: int) -> List[Tuple[int, int]]:
    """A .debug_rnglists list: entries of a DW_RLE_* kind each, up to DW_RLE_end_of_list."""
    size, order = unit.address_size, unit.info.byteorder

    def address(pos: int) -> Tuple[int, int]:
        return int.from_bytes(data[pos:pos + size], order), pos + size

    ranges = []
    while True:
        if not 0 <= pos < len(data):
            raise ValueError(f"a range list of the unit at {unit.offset:#x} runs past the end "
                             "of .debug_rnglists")
        kind = data[pos]
        pos += 1
        if kind == _END_OF_LIST:
            return ranges
        if kind == _OFFSET_PAIR:  # GCC's and clang's: offsets from the base
            start, pos = uleb(data, pos)
            end, pos = uleb(data, pos)
            ranges.append((base + start, base + end))
        elif kind == _BASE_ADDRESSX:
            index, pos = uleb(data, pos)
            base = unit.indexed_address(index)
        elif kind == _STARTX_ENDX:
            start, pos = uleb(data, pos)
            end, pos = uleb(data, pos)
            ranges.append((unit.indexed_address(start), unit.indexed_address(end)))
        elif kind == _STARTX_LENGTH:
            start, pos = uleb(data, pos)
            length, pos = uleb(data, pos)
            start = unit.indexed_address(start)
            ranges.append((start, start + length))
        elif kind == _BASE_ADDRESS:
            base, pos = address(pos)
        elif kind == _START_END:
            start, pos = address(pos)
            end, pos = address(pos)
            ranges.append((start, end))
        elif kind == _START_LENGTH:
            start, pos = address(pos)
            length, pos = uleb(data, pos)
            ranges.append((start, start + length))
        else:
            raise ValueError(f"a range list of the unit at {unit.offset:#x} holds an entry of "
                             f"unknown kind {kind}")
