"""A fast walk over the DIEs of one compilation unit that finds the DIEs of some tags without
parsing the others: each is skipped by the sizes of its abbreviation's attribute forms.

pyelftools parses a DIE (and an abbreviation table) in tens of microseconds; a unit of a big
library holds thousands of DIEs, nearly all types and variables that symbolization never reads.
"""
from typing import Dict, List, Optional, Tuple

from droidheap.elf.abbrev_table import FORM_IMPLICIT_CONST, Abbreviation
from droidheap.elf.line_table import uleb

_FORM_ADDR, _FORM_REF_ADDR, _FORM_STRING, _FORM_INDIRECT = 0x01, 0x10, 0x08, 0x16
_BLOCK_WIDTHS = {0x0A: 1, 0x03: 2, 0x04: 4}  # block1, block2, block4: length, then the bytes
_LEB_BLOCKS = {0x09, 0x18}  # block, exprloc: uleb length, then the bytes
# Forms that are one leb128: sdata, udata, ref_udata, strx, addrx, loclistx, rnglistx, GNU ones.
_LEBS = {0x0D, 0x0F, 0x15, 0x1A, 0x1B, 0x22, 0x23, 0x1F01, 0x1F02}
_FIXED = {0x0B: 1, 0x11: 1, 0x0C: 1, 0x25: 1, 0x29: 1,  # data1 ref1 flag strx1 addrx1
          0x05: 2, 0x12: 2, 0x26: 2, 0x2A: 2,  # data2 ref2 strx2 addrx2
          0x27: 3, 0x2B: 3,  # strx3 addrx3
          0x06: 4, 0x13: 4, 0x28: 4, 0x2C: 4, 0x1C: 4,  # data4 ref4 strx4 addrx4 ref_sup4
          0x07: 8, 0x14: 8, 0x20: 8, 0x24: 8,  # data8 ref8 ref_sig8 ref_sup8
          0x1E: 16, 0x19: 0, FORM_IMPLICIT_CONST: 0}  # data16 flag_present implicit_const
_OFFSET_FORMS = (0x0E, 0x1F, 0x17, 0x1D, 0x1F20, 0x1F21)  # strp line_strp sec_offset strp_sup,
# GNU_ref_alt GNU_strp_alt: a section offset, 4 or 8 bytes


def _sizes(address_size: int, offset_size: int, version: int) -> Dict[int, int]:
    sizes = dict(_FIXED)
    sizes[_FORM_ADDR] = address_size
    sizes[_FORM_REF_ADDR] = address_size if version == 2 else offset_size
    sizes.update((form, offset_size) for form in _OFFSET_FORMS)
    return sizes


def _skip(form: int, data: bytes, pos: int, sizes: Dict[int, int]) -> int:
    """The position after the attribute value of `form` at `pos`."""
    size = sizes.get(form)
    if size is not None:
        return pos + size
    if form == _FORM_STRING:
        return data.index(b"\0", pos) + 1
    width = _BLOCK_WIDTHS.get(form)
    if width is not None:
        return pos + width + int.from_bytes(data[pos:pos + width], "little")
    value, pos = uleb(data, pos)
    if form in _LEB_BLOCKS:
        return pos + value
    if form == _FORM_INDIRECT:
        return _skip(value, data, pos, sizes)
    if form in _LEBS:
        return pos
    raise ValueError(f"unknown DWARF form {form:#x}")


def find_dies(unit: bytes, first_die: int, abbreviations: Dict[int, Abbreviation],
              tags: Dict[int, object],
              address_size: int, offset_size: int, version: int) -> List[Tuple[int, int]]:
    """(position in `unit`, depth) of each DIE whose tag is in `tags`, where `unit` holds the
    unit's bytes from its header on and its first DIE starts at `first_die`."""
    sizes = _sizes(address_size, offset_size, version)
    plans: Dict[int, Tuple[bool, bool, Optional[int], List[int]]] = {}
    for code, abbreviation in abbreviations.items():
        forms = abbreviation.forms
        fixed = [sizes.get(form) for form in forms]
        plans[code] = (abbreviation.tag in tags, abbreviation.has_children,
                       sum(fixed) if None not in fixed else None, forms)
    pos, depth, found = first_die, 0, []
    end = len(unit)
    while pos < end:
        start = pos
        code, pos = uleb(unit, pos)
        if code == 0:  # the end of a list of children
            depth -= 1
            continue
        wanted, has_children, fixed, forms = plans[code]
        if wanted:
            found.append((start, depth))
        if fixed is not None:
            pos += fixed
        else:
            for form in forms:
                pos = _skip(form, unit, pos, sizes)
        if has_children:
            depth += 1
    return found
