"""DWARF abbreviation tables (`.debug_abbrev`), parsed here, for the DIE scan (die_scan.py) and for
pyelftools' own DIE parser.

pyelftools parses a whole table through `construct` the first time a unit's DIE is read: most of
the time of symbolizing a program of many units (python3: 35 tables, 0.2 s) went there. A table
parsed here serves both; pyelftools gets each declaration it asks for, built on first use.
"""
from typing import Dict, List, NamedTuple, Tuple

from elftools.dwarf.enums import ENUM_DW_AT, ENUM_DW_FORM, ENUM_DW_TAG

from droidheap.elf.line_table import sleb, uleb

FORM_IMPLICIT_CONST = 0x21


def _names(enum: Dict[str, object]) -> Dict[int, str]:
    return {code: name for name, code in enum.items() if isinstance(code, int)}


# pyelftools names tags, attributes and forms; a code it does not know stays a number.
_TAG_NAMES, _ATTRIBUTE_NAMES, _FORM_NAMES = (_names(e) for e in (ENUM_DW_TAG, ENUM_DW_AT,
                                                                   ENUM_DW_FORM))


class Abbreviation(NamedTuple):
    tag: int
    has_children: bool
    forms: List[int]  # the forms of the DIE's attribute values, in order
    specs: List[Tuple[int, int, int]]  # (attribute, form, implicit constant or 0)


def parse_table(data: bytes, offset: int) -> Dict[int, Abbreviation]:
    """The abbreviation table at `offset` of .debug_abbrev, by code."""
    table = {}
    pos = offset
    while pos < len(data):
        code, pos = uleb(data, pos)
        if code == 0:
            break
        tag, pos = uleb(data, pos)
        has_children = data[pos] != 0
        pos += 1
        specs = []
        while True:
            attribute, pos = uleb(data, pos)
            form, pos = uleb(data, pos)
            if attribute == 0 and form == 0:
                break
            constant = 0
            if form == FORM_IMPLICIT_CONST:  # its value lives here, not in the DIE
                constant, pos = sleb(data, pos)
            specs.append((attribute, form, constant))
        table[code] = Abbreviation(tag, has_children, [s[1] for s in specs], specs)
    return table


class AbbreviationCache:
    """Abbreviation tables by offset: units of one file often share one."""

    def __init__(self, debug_abbrev: bytes):
        self.data = debug_abbrev
        self._tables: Dict[int, Dict[int, Abbreviation]] = {}
        self._for_pyelftools: Dict[int, "_Table"] = {}

    def table(self, offset: int) -> Dict[int, Abbreviation]:
        if offset not in self._tables:
            self._tables[offset] = parse_table(self.data, offset)
        return self._tables[offset]

    def serve(self, dwarf) -> None:
        """Makes `dwarf` (a pyelftools DWARFInfo) read its abbreviation tables from here."""
        def get_abbrev_table(offset: int):
            if offset not in self._for_pyelftools:
                self._for_pyelftools[offset] = _Table(self.table(offset))
            return self._for_pyelftools[offset]
        dwarf.get_abbrev_table = get_abbrev_table


class _Spec(NamedTuple):
    name: object
    form: object
    value: int


class _Declaration:
    """What pyelftools reads of an abbreviation declaration: decl['tag'], decl['attr_spec'] (each
    with .name, .form and, for implicit_const, .value), has_children()."""

    def __init__(self, code: int, abbreviation: Abbreviation):
        self.code = code
        self._fields = {
            "tag": _TAG_NAMES.get(abbreviation.tag, abbreviation.tag),
            "children_flag": "DW_CHILDREN_yes" if abbreviation.has_children else "DW_CHILDREN_no",
            "attr_spec": [_Spec(_ATTRIBUTE_NAMES.get(a, a), _FORM_NAMES.get(f, f), c)
                          for a, f, c in abbreviation.specs]}
        self._has_children = abbreviation.has_children

    def has_children(self) -> bool:
        return self._has_children

    def iter_attr_specs(self):
        return ((spec.name, spec.form) for spec in self._fields["attr_spec"])

    def __getitem__(self, field: str):
        return self._fields[field]


class _Table:
    def __init__(self, abbreviations: Dict[int, Abbreviation]):
        self._abbreviations = abbreviations
        self._declarations: Dict[int, _Declaration] = {}

    def get_abbrev(self, code: int) -> _Declaration:
        if code not in self._declarations:
            self._declarations[code] = _Declaration(code, self._abbreviations[code])
        return self._declarations[code]
