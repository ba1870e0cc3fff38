"""What symbolization learnt, kept across runs: per build id, the frames of every address looked
up so far, so that converting a profile of the same binaries again parses no ELF or DWARF.

One JSON file per build id under `symbols/` of droidheap's cache directory ($DROIDHEAP_CACHE_DIR,
else $XDG_CACHE_HOME/droidheap, else ~/.cache/droidheap). An entry is used only while
the files it came from are unchanged (path, size, mtime): a debug file installed since, or a
rebuilt binary, makes the addresses be looked up afresh. A cache that cannot be read or written
costs only its speed.
"""
import json
import os
import pathlib
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from droidheap.output_files import make_private_dirs, write_output
from droidheap.safe_paths import UnsafePath, hex_build_id

# 2: names of bionic's linker (__dl_) demangled and marked [linker]; entries of 1 are looked up again.
_VERSION = 2
# (function, file, line) per frame, innermost first; [] when the address resolved to nothing.
Frames = List[Tuple[str, str, int]]


def cache_root(environ: Mapping[str, str] = os.environ) -> pathlib.Path:
    """droidheap's cache directory: what it keeps between runs, all of it safe to delete."""
    if environ.get("DROIDHEAP_CACHE_DIR"):
        return pathlib.Path(environ["DROIDHEAP_CACHE_DIR"])
    base = environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(base) / "droidheap"


def fingerprint(paths: Sequence[pathlib.Path]) -> List[list]:
    """What identifies the files symbols were read from."""
    result = []
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            continue
        result.append([str(path), stat.st_size, stat.st_mtime_ns])
    return result


class SymbolCache:
    def __init__(self, directory: Optional[pathlib.Path] = None):
        self.directory = directory or cache_root() / "symbols"

    def _path(self, build_id: str) -> pathlib.Path:
        # A build id names a file here: one a trace gives is checked to be one (UnsafePath).
        return self.directory / f"{hex_build_id(build_id)}.json"

    def load(self, build_id: str, sources: List[list]) -> Dict[int, Frames]:
        """The frames cached for the build id by rel_pc, when they came from `sources`."""
        try:
            entry = json.loads(self._path(build_id).read_text())
            if entry.get("version") != _VERSION or entry.get("sources") != sources:
                return {}
            return {int(pc): [tuple(frame) for frame in frames]
                    for pc, frames in entry["frames"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError, UnsafePath):
            return {}

    def store(self, build_id: str, sources: List[list], frames: Dict[int, Frames]) -> None:
        try:
            path = self._path(build_id)
            make_private_dirs(self.directory)
            write_output(path, json.dumps({"version": _VERSION, "sources": sources,
                                           "frames": {str(pc): f for pc, f in frames.items()}}))
        except (OSError, UnsafePath):
            pass
