"""A fast walk over the DIEs of one compilation unit that finds the DIEs of some tags without
parsing the others: each is skipped by the sizes of its abbreviation's attribute forms. Then the
attributes of the DIEs it found, read as plain values (what they name elsewhere, dwarf_unit.py
resolves).

pyelftools parses a DIE (and an abbreviation table) in tens of microseconds; a unit of a big
library holds thousands of DIEs, nearly all types and variables that symbolization never reads.
"""
from typing import Dict, List, NamedTuple, Optional, Set, Tuple

from droidheap.elf.abbrev_table import FORM_IMPLICIT_CONST, Abbreviation
from droidheap.elf.line_table import sleb, uleb

_FORM_ADDR, _FORM_REF_ADDR, _FORM_STRING, _FORM_INDIRECT = 0x01, 0x10, 0x08, 0x16
_FORM_SDATA, _FORM_DATA16, _FORM_FLAG_PRESENT = 0x0D, 0x1E, 0x19
_BLOCK_WIDTHS = {0x0A: 1, 0x03: 2, 0x04: 4}  # block1, block2, block4: length, then the bytes
_LEB_BLOCKS = {0x09, 0x18}  # block, exprloc: uleb length, then the bytes
# Forms that are one uleb128: udata, ref_udata, strx, addrx, loclistx, rnglistx, GNU ones.
_LEBS = {0x0F, 0x15, 0x1A, 0x1B, 0x22, 0x23, 0x1F01, 0x1F02}
_FIXED = {0x0B: 1, 0x11: 1, 0x0C: 1, 0x25: 1, 0x29: 1,  # data1 ref1 flag strx1 addrx1
          0x05: 2, 0x12: 2, 0x26: 2, 0x2A: 2,  # data2 ref2 strx2 addrx2
          0x27: 3, 0x2B: 3,  # strx3 addrx3
          0x06: 4, 0x13: 4, 0x28: 4, 0x2C: 4, 0x1C: 4,  # data4 ref4 strx4 addrx4 ref_sup4
          0x07: 8, 0x14: 8, 0x20: 8, 0x24: 8,  # data8 ref8 ref_sig8 ref_sup8
          _FORM_DATA16: 16, _FORM_FLAG_PRESENT: 0, FORM_IMPLICIT_CONST: 0}
_OFFSET_FORMS = (0x0E, 0x1F, 0x17, 0x1D, 0x1F20, 0x1F21)  # strp line_strp sec_offset strp_sup,
# GNU_ref_alt GNU_strp_alt: a section offset, 4 or 8 bytes

Values = Dict[int, Tuple[int, object]]  # attribute -> (form, value)


def form_sizes(address_size: int, offset_size: int, version: int) -> Dict[int, int]:
    """The size of each form whose values have one, in a unit of these sizes and version."""
    sizes = dict(_FIXED)
    sizes[_FORM_ADDR] = address_size
    sizes[_FORM_REF_ADDR] = address_size if version == 2 else offset_size
    sizes.update((form, offset_size) for form in _OFFSET_FORMS)
    return sizes


def read_value(form: int, data: bytes, pos: int, sizes: Dict[int, int],
               byteorder: str) -> Tuple[int, object, int]:
    """(form, value, position after it) of the attribute value of `form` at `pos`: the form that
    DW_FORM_indirect names in its place; a number (unsigned, but for sdata; 1 for flag_present),
    or bytes for a string, a block or data16."""
    size = sizes.get(form)
    if size is not None:
        if form == _FORM_DATA16:
            return form, data[pos:pos + size], pos + size
        if form == _FORM_FLAG_PRESENT:
            return form, 1, pos
        return form, int.from_bytes(data[pos:pos + size], byteorder), pos + size
    if form == _FORM_STRING:
        end = data.index(b"\0", pos)
        return form, data[pos:end], end + 1
    width = _BLOCK_WIDTHS.get(form)
    if width is not None:
        start = pos + width
        end = start + int.from_bytes(data[pos:start], byteorder)
        return form, data[start:end], end
    if form == _FORM_SDATA:
        value, pos = sleb(data, pos)
        return form, value, pos
    value, pos = uleb(data, pos)
    if form in _LEB_BLOCKS:
        return form, data[pos:pos + value], pos + value
    if form == _FORM_INDIRECT:
        return read_value(value, data, pos, sizes, byteorder)
    if form in _LEBS:
        return form, value, pos
    raise ValueError(f"unknown DWARF form {form:#x}")


def read_die(data: bytes, pos: int, abbreviations: Dict[int, Abbreviation],
             sizes: Dict[int, int], byteorder: str) -> Tuple[int, Values]:
    """The tag and the attribute values of the DIE at `pos`."""
    code, pos = uleb(data, pos)
    abbreviation = abbreviations.get(code)
    if abbreviation is None:
        raise ValueError(f"a DIE names abbreviation {code}, which its table lacks")
    values: Values = {}
    for attribute, form, constant in abbreviation.specs:
        if form == FORM_IMPLICIT_CONST:  # its value lives in the abbreviation
            values[attribute] = (form, constant)
        else:
            real_form, value, pos = read_value(form, data, pos, sizes, byteorder)
            values[attribute] = (real_form, value)
    return abbreviation.tag, values


def _skip(form: int, data: bytes, pos: int, sizes: Dict[int, int], byteorder: str) -> int:
    """The position after the value of a form of no fixed size at `pos`: the common ones here,
    without building the value."""
    if form == _FORM_STRING:
        return data.index(b"\0", pos) + 1
    if form in _LEBS or form == _FORM_SDATA:
        while data[pos] & 0x80:
            pos += 1
        return pos + 1
    return read_value(form, data, pos, sizes, byteorder)[2]


class _Plan(NamedTuple):
    """How the walk passes a DIE of one abbreviation: the bytes of fixed-size values before the
    first value of another form, then each such form and the fixed bytes after it. For a DIE
    wanted: where the values asked for lie when fixed-size values alone come before them (a
    number each), else None and its specs, to read them one by one."""
    wanted: bool
    has_children: bool
    lead: int
    variable: List[Tuple[int, int]]
    at_fixed_offsets: Optional[List[Tuple[int, int, int, int]]]  # (attribute, form, at, size)
    specs: List[Tuple[int, int, int]]


def _plan(abbreviation: Abbreviation, wanted: bool, attributes: Set[int],
          sizes: Dict[int, int]) -> _Plan:
    lead, variable = 0, []
    at_fixed: Optional[List[Tuple[int, int, int, int]]] = []
    for attribute, form, constant in abbreviation.specs:
        size = sizes.get(form)
        if attribute in attributes and at_fixed is not None:
            if variable or size is None or form in (_FORM_DATA16, _FORM_FLAG_PRESENT,
                                                    FORM_IMPLICIT_CONST):
                at_fixed = None
            else:
                at_fixed.append((attribute, form, lead, size))
        if size is None:
            variable.append((form, 0))
        elif variable:
            variable[-1] = (variable[-1][0], variable[-1][1] + size)
        else:
            lead += size
    return _Plan(wanted, abbreviation.has_children, lead, variable, at_fixed,
                 abbreviation.specs)


def find_dies(unit: bytes, first_die: int, end: int, abbreviations: Dict[int, Abbreviation],
              tags: Dict[int, object], attributes: Set[int], sizes: Dict[int, int],
              byteorder: str) -> List[Tuple[int, int, Values]]:
    """(position in `unit`, depth, the values of those of `attributes` it has) of each DIE whose
    tag is in `tags`, of a unit whose DIEs lie in `unit` from `first_die` to `end`."""
    plans = {code: _plan(abbreviation, abbreviation.tag in tags, attributes, sizes)
             for code, abbreviation in abbreviations.items()}
    pos, depth, found = first_die, 0, []
    while pos < end:
        start = pos
        code = unit[pos]
        pos += 1
        if code >= 0x80:
            code, pos = uleb(unit, start)
        if code == 0:  # the end of a list of children
            depth -= 1
            continue
        wanted, has_children, lead, variable, at_fixed_offsets, specs = plans[code]
        if wanted and at_fixed_offsets is None:
            values: Values = {}
            for attribute, form, constant in specs:
                size = sizes.get(form)
                if attribute not in attributes:
                    pos = pos + size if size is not None else \
                        _skip(form, unit, pos, sizes, byteorder)
                elif form == FORM_IMPLICIT_CONST:
                    values[attribute] = (form, constant)
                else:
                    real_form, value, pos = read_value(form, unit, pos, sizes, byteorder)
                    values[attribute] = (real_form, value)
            found.append((start, depth, values))
        else:
            if wanted:
                found.append((start, depth, {
                    attribute: (form, int.from_bytes(unit[pos + at:pos + at + size], byteorder))
                    for attribute, form, at, size in at_fixed_offsets}))
            pos += lead
            for form, after in variable:
                pos = _skip(form, unit, pos, sizes, byteorder) + after
        if has_children:
            depth += 1
    return found
