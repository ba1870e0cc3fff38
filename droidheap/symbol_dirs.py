"""Files below a directory given with --symbols, wherever they lie in it. An app's build keeps its
unstripped libraries deep in its tree: the Android Gradle plugin at
`app/build/intermediates/merged_native_libs/<variant>/out/lib/<abi>/libfoo.so` (the stripped
copies it packs beside them, in `stripped_native_libs/`), CMake's at `.cxx/<variant>/<hash>/<abi>/`
and ndk-build's at `obj/local/<abi>/`. So `--symbols app/build` (or the project's root) is enough.

A directory is walked once, on first use, without following links into other directories; a file
is found by its name (the largest first: an unstripped file is larger than its stripped copy of
the same build id), else, when no name matches, by its build id among the ELF files there.
Both walks stop at MAX_FILES files.
"""
import dataclasses
import os
import pathlib
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from droidheap.elf.headers import file_build_id

MAX_FILES = 200_000


class DirectoryIndex:
    """One directory's files; its walks happen when first asked."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self._by_name: Optional[Dict[str, List[pathlib.Path]]] = None
        self._by_build_id: Optional[Dict[str, pathlib.Path]] = None

    def _files(self) -> List[pathlib.Path]:
        files: List[pathlib.Path] = []
        for directory, subdirectories, names in os.walk(self.root):
            subdirectories.sort()
            for name in sorted(names):
                files.append(pathlib.Path(directory, name))
                if len(files) >= MAX_FILES:
                    return files
        return files

    def by_name(self, name: str) -> List[pathlib.Path]:
        """The files called `name` below the directory, largest first."""
        if self._by_name is None:
            self._by_name = {}
            for path in self._files():
                self._by_name.setdefault(path.name, []).append(path)
            for paths in self._by_name.values():
                paths.sort(key=_size, reverse=True)
        return self._by_name.get(name, [])

    def by_build_id(self, build_id: str) -> Optional[pathlib.Path]:
        """The largest ELF file below the directory whose build id is `build_id`."""
        if self._by_build_id is None:
            self._by_build_id = {}
            for path in sorted(self._files(), key=_size, reverse=True):
                found = file_build_id(path)
                if found:
                    self._by_build_id.setdefault(found, path)
        return self._by_build_id.get(build_id) if build_id else None


def _size(path: pathlib.Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


@dataclasses.dataclass(frozen=True)
class SearchDirs:
    """Where unstripped files are looked for: `searched`, in order; `walked` (the user's --symbols
    directories) also anywhere below, where an app's build keeps them (symbol_dirs). The
    environment's directories are not walked: an Android build's symbols/ is gigabytes, laid out
    as the device is."""
    searched: Tuple[pathlib.Path, ...]
    walked: Tuple[pathlib.Path, ...]


def search_dirs(flags: Sequence[pathlib.Path], environ: Mapping[str, str]) -> SearchDirs:
    """The --symbols directories, then PERFETTO_BINARY_PATH (colon-separated, as Perfetto's
    heap_profile reads it), then $ANDROID_PRODUCT_OUT/symbols (an Android build tree's unstripped
    files)."""
    dirs = [pathlib.Path(d) for d in flags]
    dirs += [pathlib.Path(d) for d in environ.get("PERFETTO_BINARY_PATH", "").split(":") if d]
    product_out = environ.get("ANDROID_PRODUCT_OUT", "")
    if product_out and (pathlib.Path(product_out) / "symbols").is_dir():
        dirs.append(pathlib.Path(product_out) / "symbols")
    return SearchDirs(tuple(dirs), tuple(pathlib.Path(d) for d in flags))
