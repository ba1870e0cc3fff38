"""Which traces this machine made. A trace names the files its samples came from; on the local
device those are this machine's own files, opened at their paths to symbolize it. A trace from
anywhere else (a phone's, one someone sent) is data: opened at its paths, it would put this
machine's files' symbols, source paths and lines into outputs its author may read, and tell that
author which paths exist (docs/security.md). So the paths of a trace are opened only when this
machine made it: each trace a local-device session writes, and each conversion of one, is
remembered by its SHA-256 under `made-here/` of droidheap's cache directory, an empty file per
trace, the oldest forgotten past MAX_REMEMBERED. Copies anywhere keep the right; a trace changed
by one byte, or one made before the cache was emptied, does not: the user's --symbols directories
serve it then, as any other's.
"""
import hashlib
import os
import pathlib
from typing import Iterable

from droidheap.output_files import make_private_dirs
from droidheap.symbol_cache import cache_root

MAX_REMEMBERED = 10_000


def _directory() -> pathlib.Path:
    return cache_root() / "made-here"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def remember(traces: Iterable[bytes]) -> None:
    """Notes each trace as made by this machine; a cache that cannot be written is skipped (its
    traces are then symbolized as any other's, later)."""
    directory = _directory()
    try:
        make_private_dirs(directory)
        for data in traces:
            fd = os.open(directory / _digest(data),
                         os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.utime(fd)  # the newest stays longest
            finally:
                os.close(fd)
        entries = list(directory.iterdir())
        if len(entries) > MAX_REMEMBERED:
            entries.sort(key=lambda entry: entry.stat().st_mtime)
            for entry in entries[:len(entries) - MAX_REMEMBERED]:
                entry.unlink()
    except OSError:
        pass


def made_here(data: bytes) -> bool:
    """Whether this machine made the trace `data` (remember)."""
    try:
        return (_directory() / _digest(data)).is_file()
    except OSError:
        return False
