"""Symbolizes frames of a trace on the host: function names from ELF symbol tables, file:line from
DWARF `.debug_line` (pyelftools).

A mapping's file is looked for under the extra search directories (as `<dir>/<device path>`, then
`<dir>/<file name>`) and then at its own path, since in emulator mode the device's files are the
host's. A candidate whose build id differs from the trace's is skipped. When the chosen file has
no line table, a separate debug file at `.build-id/xx/yyyy.debug` (under the search directories
or /usr/lib/debug) supplies one.

Every rel_pc is treated as a return address and moved back into its call instruction before
lookup (1 byte on x86, 4 on arm64), otherwise lines are off by one statement; results stay keyed
by the original rel_pc. Inlined frames are not expanded: each address gets one line.
"""
import bisect
import dataclasses
import mmap
import pathlib
import shutil
import subprocess
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from elftools.elf.elffile import ELFFile

from droidheap.trace.heap_dumps import Frame, TraceDumps

# Bytes from a return address back into the call instruction, by e_machine.
_RETURN_ADJUST = {"EM_X86_64": 1, "EM_386": 1, "EM_AARCH64": 4, "EM_ARM": 2, "EM_RISCV": 2}
_FUNCTION_TYPES = ("STT_FUNC", "STT_GNU_IFUNC")
_BINDING_RANK = {"STB_GLOBAL": 0, "STB_WEAK": 1, "STB_LOCAL": 2}


@dataclasses.dataclass(frozen=True)
class SourceLine:
    function: str
    file: str = ""
    line: int = 0


@dataclasses.dataclass
class ModuleSymbols:
    """What was learnt about one (path, build id): lines by original rel_pc for the addresses
    that resolved to a function or a line."""
    path: str
    build_id: str
    elf: Optional[pathlib.Path] = None
    lines: Dict[int, Tuple[SourceLine, ...]] = dataclasses.field(default_factory=dict)

    @property
    def has_functions(self) -> bool:
        return bool(self.lines)

    @property
    def has_filenames(self) -> bool:
        return any(line.file for lines in self.lines.values() for line in lines)

    @property
    def has_line_numbers(self) -> bool:
        return any(line.line for lines in self.lines.values() for line in lines)


class _LineTable:
    """Rows (address, is_end, file, line) sorted so that bisecting finds the row covering an
    address; an end_sequence row sorts before a row starting at the same address."""

    def __init__(self, rows: List[Tuple[int, bool, str, int]]):
        rows.sort(key=lambda row: (row[0], not row[1]))
        self.addresses = [row[0] for row in rows]
        self.rows = rows

    def find(self, address: int) -> Optional[Tuple[str, int]]:
        i = bisect.bisect_right(self.addresses, address) - 1
        if i < 0 or self.rows[i][1]:
            return None
        return self.rows[i][2], self.rows[i][3]


def _line_rows(dwarf, cu) -> List[Tuple[int, bool, str, int]]:
    program = dwarf.line_program_for_CU(cu)
    if program is None:
        return []
    header = program.header
    version = header.version
    dirs = [d.decode("utf-8", "replace") for d in header.include_directory]
    comp_dir_attr = cu.get_top_DIE().attributes.get("DW_AT_comp_dir")
    comp_dir = comp_dir_attr.value.decode("utf-8", "replace") if comp_dir_attr else ""
    files = []
    for entry in header.file_entry:
        name = entry.name.decode("utf-8", "replace")
        # DWARF 5 numbers directories from 0 (the compilation directory); earlier versions
        # reserve 0 for it and count include_directory from 1.
        if version >= 5:
            directory = dirs[entry.dir_index] if entry.dir_index < len(dirs) else ""
        else:
            directory = dirs[entry.dir_index - 1] if 0 < entry.dir_index <= len(dirs) else comp_dir
        files.append(name if name.startswith("/") or not directory
                     else f"{directory.rstrip('/')}/{name}")
    first_file = 0 if version >= 5 else 1
    rows = []
    for entry in program.get_entries():
        state = entry.state
        if state is None:
            continue
        index = state.file - first_file
        file = files[index] if 0 <= index < len(files) else ""
        rows.append((state.address, bool(state.end_sequence), file, state.line))
    return rows


def search_dirs(flags: Sequence[pathlib.Path], environ: Mapping[str, str]) -> List[pathlib.Path]:
    """Where unstripped files are looked for first, in order: the --symbols directories, then
    PERFETTO_BINARY_PATH (colon-separated, as Perfetto's heap_profile reads it), then
    $ANDROID_PRODUCT_OUT/symbols (an Android build tree's unstripped files)."""
    dirs = [pathlib.Path(d) for d in flags]
    dirs += [pathlib.Path(d) for d in environ.get("PERFETTO_BINARY_PATH", "").split(":") if d]
    product_out = environ.get("ANDROID_PRODUCT_OUT", "")
    if product_out and (pathlib.Path(product_out) / "symbols").is_dir():
        dirs.append(pathlib.Path(product_out) / "symbols")
    return dirs


def _build_id(elf: ELFFile) -> str:
    """The GNU build id in hex, or "". Only a note owned by "GNU" is one: SystemTap's SDT notes
    (libstdc++, python3, ...) use the same type number, 3. Read from the note sections, else (no
    section headers) from the PT_NOTE segments."""
    containers = list(elf.iter_sections("SHT_NOTE")) or list(elf.iter_segments("PT_NOTE"))
    for container in containers:
        for note in container.iter_notes():
            if note["n_name"] == "GNU" and note["n_type"] == "NT_GNU_BUILD_ID":
                return note["n_desc"]
    return ""


class ElfFile:
    """One ELF on the host, parsed lazily and cached by the Symbolizer; a separate debug file, when
    one was found, supplies the line table and extra symbols."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        with open(path, "rb") as f:
            # Mapped, not read: debug files of big libraries run to hundreds of MiB, and pages
            # pyelftools never touches are never loaded.
            self.elf = ELFFile(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        self.debug: Optional[ElfFile] = None
        self.return_adjust = _RETURN_ADJUST.get(self.elf["e_machine"], 1)
        self.build_id = _build_id(self.elf)
        self.broken: set = set()  # parts ("symbols", "line table") that failed to parse once
        self._symbols: Optional[Tuple[List[int], List[Tuple[int, str]]]] = None
        self._line_tables: Dict[Optional[int], _LineTable] = {}

    def has_line_table(self) -> bool:
        return self.elf.get_section_by_name(".debug_line") is not None

    def function_at(self, address: int) -> Optional[str]:
        if self._symbols is None:
            self._symbols = self._load_symbols()
        starts, entries = self._symbols
        i = bisect.bisect_right(starts, address) - 1
        if i < 0:
            return None
        size, name = entries[i]
        # A symbol without a size (hand-written assembly) covers up to the next one.
        if address < starts[i] + size or (size == 0 and i + 1 < len(starts)):
            return name
        return None

    def _load_symbols(self) -> Tuple[List[int], List[Tuple[int, str]]]:
        best: Dict[int, Tuple[Tuple[int, int], int, str]] = {}
        for elf in (self.elf, self.debug.elf if self.debug else None):
            if elf is None:
                continue
            for name in (".symtab", ".dynsym"):
                table = elf.get_section_by_name(name)
                if table is None or not hasattr(table, "iter_symbols"):
                    continue
                for sym in table.iter_symbols():
                    if (sym["st_info"]["type"] not in _FUNCTION_TYPES or not sym.name
                            or sym["st_shndx"] == "SHN_UNDEF"):
                        continue
                    start, size = sym["st_value"], sym["st_size"]
                    rank = (0 if size else 1, _BINDING_RANK.get(sym["st_info"]["bind"], 3))
                    if start not in best or rank < best[start][0]:
                        best[start] = (rank, size, sym.name)
        starts = sorted(best)
        names = _demangle([best[s][2] for s in starts])
        return starts, [(best[s][1], name) for s, name in zip(starts, names)]

    def line_at(self, address: int) -> Optional[Tuple[str, int]]:
        source = self.debug if self.debug is not None and self.debug.has_line_table() else self
        if not source.has_line_table():
            return None
        dwarf = source.elf.get_dwarf_info()
        # .debug_aranges names the one compilation unit to decode; clang omits it by default, in
        # which case every unit is decoded once into one table.
        cu_offset = None
        aranges = dwarf.get_aranges()
        if aranges is not None:
            cu_offset = aranges.cu_offset_at_addr(address)
        table = source._line_tables.get(cu_offset)
        if table is None:
            units = [dwarf.get_CU_at(cu_offset)] if cu_offset is not None else dwarf.iter_CUs()
            table = _LineTable([row for cu in units for row in _line_rows(dwarf, cu)])
            source._line_tables[cu_offset] = table
        return table.find(address)


def _demangle(names: List[str]) -> List[str]:
    """C++ names through one c++filt run; unchanged when it is missing or fails."""
    mangled = [i for i, name in enumerate(names) if name.startswith("_Z")]
    tool = shutil.which("c++filt")
    if not mangled or tool is None:
        return names
    try:
        out = subprocess.run([tool], input="\n".join(names[i] for i in mangled), text=True,
                             capture_output=True, check=True, timeout=60).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return names
    if len(out) != len(mangled):
        return names
    result = list(names)
    for i, name in zip(mangled, out):
        result[i] = name
    return result


class Symbolizer:
    """Finds and parses ELF files, caching each by host path, for the lifetime of one conversion."""

    def __init__(self, search_dirs: Sequence[pathlib.Path] = ()):
        self.search_dirs = [pathlib.Path(d) for d in search_dirs]
        self.warnings: List[str] = []
        self._files: Dict[pathlib.Path, Optional[ElfFile]] = {}

    def _open(self, path: pathlib.Path) -> Optional[ElfFile]:
        if path not in self._files:
            try:
                self._files[path] = ElfFile(path) if path.is_file() else None
            except Exception as e:  # noqa: BLE001 -- pyelftools raises many types on odd files
                self.warnings.append(f"cannot read {path}: {e}")
                self._files[path] = None
        return self._files[path]

    def _candidates(self, device_path: str) -> Iterable[pathlib.Path]:
        relative = device_path.lstrip("/")
        for root in self.search_dirs:
            yield root / relative
            yield root / pathlib.PurePosixPath(device_path).name
        yield pathlib.Path(device_path)

    def find_elf(self, device_path: str, build_id: str) -> Optional[ElfFile]:
        mismatched = []
        for candidate in self._candidates(device_path):
            elf = self._open(candidate)
            if elf is None:
                continue
            found = elf.build_id
            if build_id and found and found != build_id:
                mismatched.append(str(candidate))
                continue
            if elf.debug is None and not elf.has_line_table() and (build_id or found):
                elf.debug = self._debug_file(build_id or found)
            return elf
        if mismatched:
            self.warnings.append(f"{device_path}: build id {build_id} differs from that of "
                                 f"{', '.join(mismatched)}; not symbolized")
        return None

    def _debug_file(self, build_id: str) -> Optional[ElfFile]:
        tail = pathlib.Path(".build-id", build_id[:2], build_id[2:] + ".debug")
        for root in [*self.search_dirs, pathlib.Path("/usr/lib/debug")]:
            debug = self._open(root / tail)
            if debug is not None and debug.build_id in ("", build_id):
                return debug
        return None

    def _guarded(self, elf: ElfFile, what: str, lookup, address: int):
        """Runs one lookup; a file whose symbols or DWARF are too odd for pyelftools loses that
        part (once, with a warning) instead of ending the conversion."""
        if what in elf.broken:
            return None
        try:
            return lookup(address)
        except Exception as e:  # noqa: BLE001 -- pyelftools raises many types on odd input
            elf.broken.add(what)
            self.warnings.append(f"{elf.path}: cannot read its {what}: {e!r}")
            return None

    def symbolize(self, device_path: str, build_id: str, rel_pcs: Iterable[int]) -> ModuleSymbols:
        result = ModuleSymbols(device_path, build_id)
        elf = self.find_elf(device_path, build_id)
        if elf is None:
            return result
        result.elf = elf.path
        basename = pathlib.PurePosixPath(device_path).name
        for rel_pc in sorted(set(rel_pcs)):
            address = max(0, rel_pc - elf.return_adjust)
            function = self._guarded(elf, "symbols", elf.function_at, address)
            line = self._guarded(elf, "line table", elf.line_at, address)
            if function is None and line is None:
                continue
            file, number = line if line else ("", 0)
            name = function or f"{basename}+{rel_pc:#x}"
            result.lines[rel_pc] = (SourceLine(name, file, number),)
        return result


@dataclasses.dataclass
class SymbolTable:
    """Symbols of every mapping of a trace, by (path, build id)."""
    modules: Dict[Tuple[str, str], ModuleSymbols]

    def lines(self, frame: Frame) -> Tuple[SourceLine, ...]:
        """The frame's lines, innermost first; never empty: pseudo frames are named by their
        path, unresolved ones `<file name>+0x<rel_pc>` (or by the name the trace gave them)."""
        mapping = frame.mapping
        if mapping.is_pseudo:
            return (SourceLine(mapping.display_path),)
        module = self.modules.get((mapping.path, mapping.build_id))
        if module is not None and frame.rel_pc in module.lines:
            return module.lines[frame.rel_pc]
        name = pathlib.PurePosixPath(mapping.display_path).name or "[anonymous]"
        return (SourceLine(frame.function_name or f"{name}+{frame.rel_pc:#x}"),)


def reached_modules(dumps: TraceDumps) -> Dict[Tuple[str, str], set]:
    """{(device path, build id): rel_pcs} of every real mapping that the dumps' samples reach."""
    wanted: Dict[Tuple[str, str], set] = {}
    for process_dumps in dumps.dumps.values():
        for dump in process_dumps:
            for sample in dump.samples:
                for frame in sample.frames:
                    if not frame.mapping.is_pseudo and frame.mapping.path:
                        key = (frame.mapping.path, frame.mapping.build_id)
                        wanted.setdefault(key, set()).add(frame.rel_pc)
    return wanted


def symbolize_dumps(dumps: TraceDumps, symbolizer: Symbolizer) -> SymbolTable:
    """Symbolizes every rel_pc of every real mapping that the dumps' samples reach."""
    return SymbolTable({key: symbolizer.symbolize(key[0], key[1], pcs)
                        for key, pcs in sorted(reached_modules(dumps).items())})
