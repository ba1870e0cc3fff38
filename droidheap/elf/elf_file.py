"""One ELF file on the host, parsed lazily: its GNU build id, function symbols (`.symtab`, else
`.dynsym`, plus those of its MiniDebugInfo and of a separate debug file), and through DWARF the
source line and the inlined calls at an address."""
import bisect
import io
import mmap
import pathlib
import shutil
import struct
import subprocess
from typing import Dict, List, Optional, Tuple, Union

from elftools.elf.constants import P_FLAGS
from elftools.elf.elffile import ELFFile

from droidheap.bounded_inflate import XZ, ZLIB, check_claim, inflate
from droidheap.elf.abbrev_table import AbbreviationCache
from droidheap.elf.dwarf_index import Scope, ScopeIndex, UnitIndex, read_aranges
from droidheap.elf.dwarf_unit import DebugInfo
from droidheap.elf.headers import (EM_386, EM_AARCH64, EM_ARM, EM_RISCV, EM_X86_64, SHT_NOBITS,
                                   read_headers)
from droidheap.elf.line_table import LineTable, file_names, line_rows

# Bytes from a return address back into the call instruction, by e_machine.
_RETURN_ADJUST = {EM_X86_64: 1, EM_386: 1, EM_AARCH64: 4, EM_ARM: 2, EM_RISCV: 2}
_FUNCTION_TYPES = (2, 10)  # STT_FUNC, STT_GNU_IFUNC
_BINDING_RANK = {1: 0, 2: 1, 0: 2}  # global, then weak, then local names win at one address
# Elf64_Sym and Elf32_Sym fields in file order; the names of (name, info, shndx, value, size).
_SYM_LAYOUT = {64: ("IBBHQQ", (0, 1, 3, 4, 5)), 32: ("IIIBBH", (0, 3, 5, 1, 2))}
# Decompressed MiniDebugInfo is a few MiB at most; a bigger one is not what it claims.
_MINIDEBUGINFO_LIMIT = 256 << 20
# bionic's dynamic linker carries its own copy of libc and libc++, each symbol renamed with this
# prefix so that none clashes with the libraries it loads (`__dl__ZN6soinfo17call_constructorsEv`,
# `__dl_strlen`). Named without it, marked as simpleperf marks them:
# `[linker]soinfo::call_constructors()`.
_LINKER_PREFIX = "__dl_"
_LINKER_MARK = "[linker]"


def demangle(names: List[str]) -> List[str]:
    """C++ names through one c++filt run; unchanged when it is missing or fails. The names of
    bionic's dynamic linker lose its prefix and are marked as its own (see _LINKER_PREFIX)."""
    linker = [name.startswith(_LINKER_PREFIX) for name in names]
    bare = [name[len(_LINKER_PREFIX):] if own else name for name, own in zip(names, linker)]
    result = [_LINKER_MARK + name if own else name for name, own in zip(bare, linker)]
    mangled = [i for i, name in enumerate(bare) if name.startswith("_Z")]
    tool = shutil.which("c++filt")
    if not mangled or tool is None:
        return result
    try:
        out = subprocess.run([tool], input="\n".join(bare[i] for i in mangled), text=True,
                             capture_output=True, check=True, timeout=60).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return result
    if len(out) != len(mangled):
        return result
    for i, name in zip(mangled, out):
        result[i] = _LINKER_MARK + name if linker[i] else name
    return result


def _function_symbols(elf: ELFFile, section_name: str):
    """(start, size, binding, name) of each defined function symbol of a symbol table section.
    Unpacked here in one pass: pyelftools builds a container per symbol, slow on the tens of
    thousands of a big library."""
    table = elf.get_section_by_name(section_name)
    if table is None or table["sh_type"] not in ("SHT_SYMTAB", "SHT_DYNSYM"):
        return
    strings = elf.get_section(table["sh_link"])
    if strings["sh_type"] == "SHT_NOBITS":  # pyelftools would make zeros of the size it claims
        return
    strings = strings.data()
    layout, (name_at, info_at, shndx_at, value_at, size_at) = _SYM_LAYOUT[elf.elfclass]
    fmt = ("<" if elf.little_endian else ">") + layout
    data = table.data()
    entry_size = struct.calcsize(fmt)
    for fields in struct.iter_unpack(fmt, data[:len(data) - len(data) % entry_size]):
        info = fields[info_at]
        if info & 0xF not in _FUNCTION_TYPES or fields[shndx_at] == 0 or not fields[name_at]:
            continue
        offset = fields[name_at]
        name = strings[offset:strings.index(b"\0", offset)].decode("utf-8", "replace")
        yield fields[value_at], fields[size_at], info >> 4, name


class ElfFile:
    """One ELF, parsed lazily and cached by the Symbolizer. `debug`, a separate debug file when
    one was found, supplies DWARF and extra symbols; `.gnu_debugdata` (MiniDebugInfo, an
    xz-compressed ELF that Android's and Fedora's stripped libraries carry) extra symbols."""

    def __init__(self, source: Union[pathlib.Path, bytes], path: Optional[pathlib.Path] = None):
        if isinstance(source, bytes):
            self.path = path or pathlib.Path("<memory>")
            self._data: Union[bytes, mmap.mmap] = source
        else:
            self.path = source
            with open(source, "rb") as f:
                # Mapped, not read: debug files of big libraries run to hundreds of MiB, and
                # pages never touched are never loaded.
                self._data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.headers = read_headers(self._data)
        # A file that claims more than it could hold is refused whole, before pyelftools
        # inflates anything: the symbolizer leaves it unused, with a warning.
        for name, claimed, stored in self.headers.inflated_sizes(self._data):
            check_claim(f"its section {name}", claimed, stored)
        self._elf: Optional[ELFFile] = None
        self.debug: Optional[ElfFile] = None
        self.return_adjust = _RETURN_ADJUST.get(self.headers.machine, 1)
        self.build_id = self.headers.build_id(self._data)
        self.broken: set = set()  # parts ("symbols", "line table", ...) that failed once
        self._symbols: Optional[Tuple[List[int], List[Tuple[int, str]]]] = None
        self._line_tables: Dict[Optional[int], LineTable] = {}
        self._file_tables: Dict[int, tuple] = {}  # unit offset -> (line program, files, first)
        self._dwarf = None  # pyelftools re-reads (and inflates) every section on each call
        self._debug_info: Optional[DebugInfo] = None
        self._units: Optional[UnitIndex] = None
        self._scopes: Optional[ScopeIndex] = None
        self.abbreviations: Optional[AbbreviationCache] = None  # with the DWARF

    @property
    def elf(self) -> ELFFile:
        """pyelftools' view, opened when symbols or DWARF are first read: a file whose symbols
        come from the cache needs only its headers."""
        if self._elf is None:
            self._elf = ELFFile(io.BytesIO(self._data) if isinstance(self._data, bytes)
                                else self._data)
        return self._elf

    def code_load_bias(self, offset: Optional[int]) -> int:
        """p_vaddr - p_offset of the executable PT_LOAD that a mapping at file offset `offset`
        (a page boundary at or below the segment's start) holds; with no such mapping offset
        (None: not known in the file's own terms), of the file's only executable PT_LOAD; else
        0. lld puts code on its own page at 0x1000 past its file offset: a bias of 0x1000."""
        code = [segment.header for segment in self.elf.iter_segments()
                if segment.header.p_type == "PT_LOAD" and segment.header.p_flags & P_FLAGS.PF_X]
        for header in code:
            if offset is not None and \
                    offset <= header.p_offset < offset + max(header.p_align, 4096):
                return header.p_vaddr - header.p_offset
        if offset is None and len(code) == 1:
            return code[0].p_vaddr - code[0].p_offset
        return 0

    def section_data(self, name: str) -> Optional[bytes]:
        data = self.headers.data(self._data, name)
        section = self.headers.sections.get(name)
        if data is None and section is not None and section.type != SHT_NOBITS:
            return self.elf.get_section_by_name(name).data()  # compressed: pyelftools inflates
        return data

    def has_section(self, name: str) -> bool:
        return name in self.headers.sections

    def has_line_table(self) -> bool:
        return self.has_section(".debug_line")

    def debug_link(self) -> Optional[str]:
        """The file name `.gnu_debuglink` names (its CRC is not checked: the build id is)."""
        data = self.section_data(".gnu_debuglink")
        if not data or b"\0" not in data:
            return None
        return data[:data.index(b"\0")].decode("utf-8", "replace") or None

    def mini_debug_info(self) -> Optional["ElfFile"]:
        data = self.section_data(".gnu_debugdata")
        if not data:
            return None
        return ElfFile(inflate(data, "its .gnu_debugdata", XZ, _MINIDEBUGINFO_LIMIT),
                       pathlib.Path(f"{self.path}[.gnu_debugdata]"))

    def symbol_at(self, address: int) -> Optional[Tuple[int, str]]:
        """(start, demangled name) of the function symbol holding the address."""
        if self._symbols is None:
            self._symbols = self._load_symbols()
        starts, entries = self._symbols
        i = bisect.bisect_right(starts, address) - 1
        if i < 0:
            return None
        size, name = entries[i]
        # A symbol without a size (hand-written assembly) covers up to the next one.
        if address < starts[i] + size or (size == 0 and i + 1 < len(starts)):
            return starts[i], name
        return None

    def _load_symbols(self) -> Tuple[List[int], List[Tuple[int, str]]]:
        best: Dict[int, Tuple[Tuple[int, int], int, str]] = {}
        sources = [self.elf]
        if self.debug is not None:
            sources.append(self.debug.elf)
        if "minidebuginfo" not in self.broken:
            try:
                mini = self.mini_debug_info()
            except Exception:  # noqa: BLE001 -- a damaged section (xz, ELF) costs only itself
                self.broken.add("minidebuginfo")
                mini = None
            if mini is not None:
                sources.append(mini.elf)
        for elf in sources:
            for name in (".symtab", ".dynsym"):
                for start, size, bind, symbol in _function_symbols(elf, name):
                    rank = (0 if size else 1, _BINDING_RANK.get(bind, 3))
                    if start not in best or rank < best[start][0]:
                        best[start] = (rank, size, symbol)
        starts = sorted(best)
        names = demangle([best[s][2] for s in starts])
        return starts, [(best[s][1], name) for s, name in zip(starts, names)]

    def _dwarf_source(self) -> Optional["ElfFile"]:
        for candidate in (self.debug, self):
            if candidate is not None and candidate.has_line_table():
                return candidate
        return None

    def dwarf(self):
        if self._dwarf is None:
            # pyelftools inflates `.zdebug_*` sections whatever they turn out to hold, and checks
            # their size after: they are inflated here first, bounded, and dropped.
            for section in self.headers.every_section:
                if section.name.startswith(".zdebug") and section.type != SHT_NOBITS:
                    start = section.offset + 12  # past "ZLIB" and the size
                    inflate(bytes(self._data[start:section.offset + section.size]),
                            f"its section {section.name}", ZLIB)
            # Only an object file's DWARF has relocations to apply; pyelftools looks for them in
            # every section for each DWARF section.
            self._dwarf = self.elf.get_dwarf_info(
                relocate_dwarf_sections=self.elf["e_type"] == "ET_REL")
            section = self._dwarf.debug_abbrev_sec
            if section is not None:
                section.stream.seek(0)
                self.abbreviations = AbbreviationCache(section.stream.read())
                self.abbreviations.serve(self._dwarf)
        return self._dwarf

    def debug_info(self) -> DebugInfo:
        """The units of its .debug_info, read here rather than by pyelftools."""
        if self._debug_info is None:
            dwarf = self.dwarf()  # which reads the abbreviations
            self._debug_info = DebugInfo(dwarf, self.abbreviations)
        return self._debug_info

    def _unit_index(self, source: "ElfFile") -> UnitIndex:
        if source._units is None:
            source._units = UnitIndex(source.debug_info(), read_aranges(source.dwarf()))
        return source._units

    def _unit_files(self, offset: int) -> tuple:
        """(line program, file names, index of the first) of the unit at `offset`, parsed once."""
        if offset not in self._file_tables:
            cu = self.dwarf().get_CU_at(offset)
            program = self.dwarf().line_program_for_CU(cu)
            self._file_tables[offset] = (program, *file_names(program, cu))
        return self._file_tables[offset]

    def line_at(self, address: int) -> Optional[Tuple[str, int]]:
        source = self._dwarf_source()
        if source is None:
            return None
        # Only the unit holding the address is decoded; an address no unit claims (odd
        # producers) makes every unit decode, once, into one table.
        cu_offset = self._unit_index(source).unit_offset_at(address)
        table = source._line_tables.get(cu_offset)
        if table is None:
            units = [cu_offset] if cu_offset is not None else source.debug_info().offsets()
            table = LineTable([row for offset in units
                               for row in line_rows(*source._unit_files(offset))])
            source._line_tables[cu_offset] = table
        return table.find(address)

    def scopes_at(self, address: int) -> List[Scope]:
        """The function and the inlined calls holding the address, outermost first; [] without
        DWARF."""
        source = self._dwarf_source()
        if source is None or not source.has_section(".debug_info"):
            return []
        if source._scopes is None:
            source._scopes = ScopeIndex(source.debug_info(), self._unit_index(source),
                                        lambda offset: source._unit_files(offset)[1:])
        return source._scopes.scopes_at(address)
