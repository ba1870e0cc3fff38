"""Symbolizes frames of a trace on the host: function names from ELF symbol tables, file:line and
inlined calls from DWARF (droidheap/elf/; pyelftools inflates its sections and reads the headers
of its line programs).

Where a mapping's file is looked for, in order: the extra search directories (as `<dir>/<device
path>`, then `<dir>/<file name>`), then anywhere below the --symbols directories by file name
(symbol_dirs: an app's build tree), then its own path (on the local device the device's files are
this machine's; only for a trace this machine made: made_here.py), and last, below the --symbols
directories, by build id. A library inside an APK
(`…/base.apk!/lib/x86_64/libfoo.so`, heapprofd's `…/base.apk!libfoo.so`) is called `libfoo.so`. A candidate whose build id differs from the trace's is never used. A device path is data
(safe_paths): one that is not absolute and normalised is refused, with a warning, and so is a
candidate in a directory of files pulled from the device (`add_device_files`) that a symlink
there leads out of it; the user's own search directories may link anywhere. DWARF comes from the
file itself, else from a separate debug file: `.build-id/xx/yyyy.debug` under the search
directories or /usr/lib/debug, else the file its `.gnu_debuglink` names, next to it, in its
`.debug/` or under /usr/lib/debug. MiniDebugInfo (`.gnu_debugdata`) adds the symbols of static
functions that a stripped file lost.

Every rel_pc is treated as a return address and moved back into its call instruction before
lookup (1 byte on x86, 4 on arm64), otherwise lines are off by one statement; results stay keyed
by the original rel_pc. An address inside inlined calls gets one line per function, innermost
first: the inlined function at the address's own line, then each caller at the line it was
inlined from, ending with the function the symbol table names.
"""
import dataclasses
import itertools
import pathlib
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

from droidheap.apk_library import library_file_name, split_library_path
from droidheap.bulk import by_identity
from droidheap.elf.elf_file import ElfFile, demangle
from droidheap.progress import progress_bar
from droidheap.safe_paths import UnsafePath, contained, device_relative, hex_build_id, plain_name
from droidheap.symbol_cache import Frames, SymbolCache, fingerprint
from droidheap.symbol_dirs import DirectoryIndex, SearchDirs
from droidheap.trace.heap_dumps import Frame, TraceDumps

SYSTEM_DEBUG_DIR = pathlib.Path("/usr/lib/debug")


@dataclasses.dataclass(frozen=True)
class SourceLine:
    function: str
    file: str = ""
    line: int = 0


@dataclasses.dataclass
class ModuleSymbols:
    """What was learnt about one (path, build id): lines by original rel_pc (innermost first) for
    the addresses that resolved to a function or a line; when nothing did, why not."""
    path: str
    build_id: str
    elf: Optional[pathlib.Path] = None
    lines: Dict[int, Tuple[SourceLine, ...]] = dataclasses.field(default_factory=dict)
    unsymbolized_reason: str = ""
    unnamed: int = 0  # addresses looked up that resolved to nothing (static functions, stripped)

    @property
    def has_functions(self) -> bool:
        return bool(self.lines)

    @property
    def has_filenames(self) -> bool:
        return any(line.file for lines in self.lines.values() for line in lines)

    @property
    def has_line_numbers(self) -> bool:
        return any(line.line for lines in self.lines.values() for line in lines)

    @property
    def has_inline_frames(self) -> bool:
        return any(len(lines) > 1 for lines in self.lines.values())


class Symbolizer:
    """Finds and parses ELF files, caching each by host path, for the lifetime of one conversion;
    with a SymbolCache, what it looked up outlives the run."""

    def __init__(self, search_dirs: Union[SearchDirs, Sequence[pathlib.Path]] = (),
                 system_debug_dir: pathlib.Path = SYSTEM_DEBUG_DIR,
                 cache: Optional[SymbolCache] = None, host_paths: bool = False):
        """`search_dirs`: SearchDirs, or directories both searched and walked. `host_paths`: the
        trace's paths name this machine's files (made_here), which may be opened there."""
        if not isinstance(search_dirs, SearchDirs):
            search_dirs = SearchDirs(tuple(search_dirs), tuple(search_dirs))
        self.search_dirs = [pathlib.Path(d) for d in search_dirs.searched]
        self._walked = {pathlib.Path(d) for d in search_dirs.walked}
        self.cache = cache
        self.system_debug_dir = system_debug_dir
        self.host_paths = host_paths
        self.warnings: List[str] = []
        self._files: Dict[pathlib.Path, Optional[ElfFile]] = {}
        self._device_dirs: Set[pathlib.Path] = set()
        self._indexes: Dict[pathlib.Path, DirectoryIndex] = {}

    def _trees(self) -> List[DirectoryIndex]:
        """The walked directories (SearchDirs), in search order."""
        return [self._indexes.setdefault(root, DirectoryIndex(root)) for root in self.search_dirs
                if root in self._walked and root.is_dir()]

    def add_device_files(self, directory: pathlib.Path) -> None:
        """Looks in `directory`, the device's files pulled at their device paths, first."""
        self.search_dirs.insert(0, directory)
        self._device_dirs.add(directory)

    def _warn(self, warning: str) -> None:
        if warning not in self.warnings:  # a path is looked for again after a fetch
            self.warnings.append(warning)

    def _open(self, path: pathlib.Path) -> Optional[ElfFile]:
        if path not in self._files:
            try:
                self._files[path] = ElfFile(path) if path.is_file() else None
            except Exception as e:  # noqa: BLE001 -- pyelftools raises many types on odd files
                self.warnings.append(f"cannot read {path}: {e}")
                self._files[path] = None
        return self._files[path]

    def _candidates(self, device_path: str, build_id: str) -> Iterable[pathlib.Path]:
        try:
            relative = device_relative(device_path)
        except UnsafePath as e:
            self._warn(str(e))
            return
        name = library_file_name(device_path)
        for root in self.search_dirs:
            for candidate in (root / relative, root / name):
                if root in self._device_dirs:
                    try:
                        contained(root, candidate, device_path)
                    except UnsafePath as e:
                        self._warn(str(e))
                        continue
                yield candidate
        for tree in self._trees():
            yield from tree.by_name(name)
        if self.host_paths:
            yield pathlib.Path(device_path)
        for tree in self._trees():
            found = tree.by_build_id(build_id)
            if found is not None:
                yield found

    def find_elf(self, device_path: str, build_id: str) -> Optional[ElfFile]:
        """The file to symbolize `device_path` with, its debug file attached; None when no
        candidate matches."""
        elf, _ = self._find(device_path, build_id)
        return elf

    def _find(self, device_path: str, build_id: str) -> Tuple[Optional[ElfFile], str]:
        mismatched = []
        for candidate in self._candidates(device_path, build_id):
            elf = self._open(candidate)
            if elf is None:
                continue
            found = elf.build_id
            if build_id and found and found != build_id:
                mismatched.append(str(candidate))
                continue
            if elf.debug is None and not elf.has_line_table():
                elf.debug = self._debug_file(elf, build_id or found)
            return elf, ""
        if mismatched:
            return None, f"build id {build_id} differs from that of {', '.join(mismatched)}"
        return None, "no file found"

    def _debug_file(self, elf: ElfFile, build_id: str) -> Optional[ElfFile]:
        """A separate debug file of `elf` with the same build id (or, lacking one, found by
        name): by build id first, then by the name its .gnu_debuglink gives."""
        places = []
        try:
            tail = pathlib.Path(".build-id", build_id[:2], hex_build_id(build_id)[2:] + ".debug")
            places += [root / tail for root in [*self.search_dirs, self.system_debug_dir]]
        except UnsafePath:
            pass  # none, or not one (given to symbolize()): only the debug link is followed
        link = elf.debug_link()
        if link:
            try:
                plain_name(link)  # a file's own bytes: it names a file beside it, nothing else
            except UnsafePath as e:
                self._warn(f"{elf.path}: {e} (its .gnu_debuglink)")
                link = None
        if link:
            directory = elf.path.parent
            places += [directory / link, directory / ".debug" / link,
                       self.system_debug_dir / directory.relative_to(directory.anchor) / link,
                       *(root / link for root in self.search_dirs)]
        for place in places:
            debug = self._open(place) if place != elf.path else None
            if debug is not None and debug.build_id in ("", build_id):
                return debug
        return None

    def _guarded(self, elf: ElfFile, what: str, lookup, address: int, default=None):
        """Runs one lookup; a file whose symbols or DWARF are too odd for pyelftools loses that
        part (once, with a warning) instead of ending the conversion."""
        if what in elf.broken:
            return default
        try:
            return lookup(address)
        except Exception as e:  # noqa: BLE001 -- pyelftools raises many types on odd input
            elf.broken.add(what)
            self.warnings.append(f"{elf.path}: cannot read its {what}: {e!r}")
            return default

    def symbolize(self, device_path: str, build_id: str, rel_pcs: Iterable[int],
                  unbiased: Optional[Dict[int, Optional[int]]] = None) -> ModuleSymbols:
        """The lines of each of `rel_pcs` in the file. `unbiased` gives, for rel_pcs whose
        mapping the trace gave no load bias, that mapping's offset in the ELF file (None: not
        known): Android 10's heapprofd (its libunwindstack) left the bias out of the mapping and
        of its rel_pcs where code is mapped past its file offset (lld's layout), so the file's
        own bias is added to them (ElfFile.code_load_bias)."""
        result = ModuleSymbols(device_path, build_id)
        elf, result.unsymbolized_reason = self._find(device_path, build_id)
        if elf is None:
            return result
        result.elf = elf.path
        pcs = sorted(set(rel_pcs))
        address = {pc: pc for pc in pcs}
        biases: Dict[Optional[int], int] = {}  # per mapping offset
        for pc, offset in (unbiased or {}).items():
            if offset not in biases:
                biases[offset] = self._guarded(elf, "program headers", elf.code_load_bias, offset,
                                               0)
            address[pc] = pc + biases[offset]
        key = build_id or elf.build_id
        sources = fingerprint([elf.path] + ([elf.debug.path] if elf.debug else []))
        cached = self.cache.load(key, sources) if self.cache and key else {}
        missing = sorted({address[pc] for pc in pcs} - cached.keys())
        found = self._look_up(elf, pathlib.PurePosixPath(device_path).name, missing)
        # A file that failed to parse in part is not cached: the next run tries it again.
        if missing and self.cache and key and not elf.broken:
            self.cache.store(key, sources, {**cached, **found})
        for pc in pcs:
            frames = cached[address[pc]] if address[pc] in cached else found[address[pc]]
            if frames:
                result.lines[pc] = tuple(SourceLine(*frame) for frame in frames)
        result.unnamed = len(pcs) - len(result.lines)
        if not result.lines:
            result.unsymbolized_reason = f"{elf.path} has no symbols or line table for its frames"
        return result

    def _look_up(self, elf: ElfFile, basename: str, rel_pcs: List[int]) -> Dict[int, Frames]:
        """The frames of each rel_pc, innermost first; [] for one that resolved to nothing."""
        found: Dict[int, Frames] = {}
        for rel_pc in rel_pcs:
            found[rel_pc] = []
            address = max(0, rel_pc - elf.return_adjust)
            symbol = self._guarded(elf, "symbols", elf.symbol_at, address)
            line = self._guarded(elf, "line table", elf.line_at, address)
            if symbol is None and line is None:
                continue
            file, number = line if line else ("", 0)
            scopes = self._guarded(elf, "inlined calls", elf.scopes_at, address, [])
            # The function is the innermost non-inlined scope; the calls inlined into it follow.
            # Its name: the symbol table's public one when a symbol starts at its entry ("abort"
            # where DWARF says "__GI_abort"), else DWARF's: a ".cold" piece, a ".part.0" clone
            # is named as the function it belongs to.
            outer = max((i for i, scope in enumerate(scopes) if not scope.inlined), default=-1)
            function = symbol[1] if symbol else None
            if outer >= 0 and scopes[outer].name and not (
                    symbol and symbol[0] == scopes[outer].entry and "." not in symbol[1]):
                function = scopes[outer].name
            for call in reversed(scopes[outer + 1:]):  # innermost first
                found[rel_pc].append((call.name, file, number))
                file, number = call.call_file, call.call_line
            found[rel_pc].append((function or f"{basename}+{rel_pc:#x}", file, number))
        # DWARF's names are linkage names; the symbol table's are demangled already (and pass
        # through c++filt unchanged).
        names = sorted({frame[0] for frames in found.values() for frame in frames})
        readable = dict(zip(names, demangle(names)))
        return {pc: [(readable[name], file, line) for name, file, line in frames]
                for pc, frames in found.items()}


@dataclasses.dataclass
class SymbolTable:
    """Symbols of every mapping of a trace, by (path, build id)."""
    modules: Dict[Tuple[str, str], ModuleSymbols]

    def lines(self, frame: Frame) -> Tuple[SourceLine, ...]:
        """The frame's lines, innermost first; never empty: pseudo frames are named by their
        path, unresolved ones `<file name>+0x<rel_pc>` (or by the name the trace gave them)."""
        mapping = frame.mapping
        if mapping.is_pseudo:
            return (SourceLine(frame.function_name or mapping.display_path),)
        module = self.modules.get((mapping.path, mapping.build_id))
        if module is not None and frame.rel_pc in module.lines:
            return module.lines[frame.rel_pc]
        name = library_file_name(mapping.display_path) or "[anonymous]"
        return (SourceLine(frame.function_name or f"{name}+{frame.rel_pc:#x}"),)


_BIASED = -1  # reached_modules: a rel_pc whose mapping gave its load bias
_OFFSET_UNKNOWN = -2  # ... gave none, nor the offset of its ELF file in the file mapped


def reached_modules(dumps: TraceDumps) -> Dict[Tuple[str, str], Dict[int, int]]:
    """{(device path, build id): {rel_pc: its mapping's offset in its ELF file when the trace gave
    that mapping no load bias, else _BIASED}} of every real mapping that the dumps' samples
    reach. Android 10's heapprofd gives a library inside an APK the mapping's offset in the APK
    alone: _OFFSET_UNKNOWN."""
    wanted: Dict[Tuple[str, str], Dict[int, int]] = {}
    # Each call stack, then each frame, once: every dump that has them shares one object
    # (heap_dumps interns them), found by identity with C loops.
    stacks = by_identity(dumps.call_stacks())
    for frame in by_identity(itertools.chain.from_iterable(stacks.values())).values():
        mapping = frame.mapping
        if not mapping.is_pseudo and mapping.path:
            pcs = wanted.setdefault((mapping.path, mapping.build_id), {})
            if pcs.get(frame.rel_pc, _BIASED) != _BIASED:
                continue
            if mapping.load_bias:
                pcs[frame.rel_pc] = _BIASED
            elif split_library_path(mapping.path) and not mapping.elf_offset:
                pcs[frame.rel_pc] = _OFFSET_UNKNOWN
            else:
                pcs[frame.rel_pc] = mapping.elf_file_offset
    return wanted


def symbolize_dumps(dumps: TraceDumps, symbolizer: Symbolizer) -> SymbolTable:
    """Symbolizes every rel_pc of every real mapping that the dumps' samples reach."""
    modules = sorted(reached_modules(dumps).items())
    symbols = {}
    with progress_bar("symbolizing", len(modules)) as bar:
        for key, pcs in modules:
            unbiased = {pc: None if offset == _OFFSET_UNKNOWN else offset
                        for pc, offset in pcs.items() if offset != _BIASED}
            symbols[key] = symbolizer.symbolize(key[0], key[1], pcs, unbiased)
            bar.update(1)
    return SymbolTable(symbols)
