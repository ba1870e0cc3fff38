"""How droidheap writes every file on this machine (traces pulled, device files, outputs, its
caches): a new file at a random name beside the final one, created without following links
(O_CREAT|O_EXCL|O_NOFOLLOW), renamed onto the final name once complete. A crash leaves no half
file under the real name, and a symlink planted at that name (in a directory someone sent) is
replaced itself: os.replace renames over the link, never through it to what it points to. Each is
readable by its owner alone (0600), whatever the umask; the output directories droidheap makes,
its caches' (make_private_dirs) and the local device's root, likewise (0700).

The directory itself is trusted: the caller named it, or checked it (safe_paths). A failure is an
OSError, the temporary file removed.
"""
import collections
import concurrent.futures
import contextlib
import gzip
import os
import pathlib
import secrets
import shutil
from typing import IO, Deque, Iterator, Tuple, Union

# Windows has neither O_NOFOLLOW nor O_CLOEXEC (Python's descriptors are not inherited there
# either, PEP 446) and writes bytes unchanged only with O_BINARY.
_CREATE = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
           | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
_NAME_ROOM = 200  # of a final name kept in the temporary one, which must fit NAME_MAX


def _temporary_name(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(f".{path.name[:_NAME_ROOM]}.{secrets.token_hex(6)}.tmp")


def _create_beside(path: pathlib.Path) -> Tuple[pathlib.Path, int]:
    while True:
        tmp = _temporary_name(path)
        try:
            # Its owner's alone: outputs hold command lines, paths and symbols, pulled files a
            # phone's code, the caches both.
            return tmp, os.open(tmp, _CREATE, 0o600)
        except FileExistsError:
            continue


def _replace(tmp: pathlib.Path, path: pathlib.Path) -> None:
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def open_output(path: pathlib.Path, mode: str = "wb", **kwargs) -> Iterator[IO]:
    """A writable file (`mode` "wb" or "w") that becomes `path` when the block ends without an
    exception, and is removed when it does not."""
    path = pathlib.Path(path)
    tmp, fd = _create_beside(path)
    try:
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _replace(tmp, path)


def write_output(path: pathlib.Path, data: Union[bytes, str]) -> None:
    with open_output(path, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


def write_gzip_output(path: pathlib.Path, data: bytes) -> None:
    """`data` gzip'd at `path`. mtime=0: the same data always gives the same file. Level 3: on a
    40 MB trace's 51 pprof files, 6 took 2.4 times as long for 15% less, 9 another 6 times."""
    write_output(path, gzip.compress(data, compresslevel=3, mtime=0))


class BackgroundWrites:
    """write_gzip_output on one thread beside its owner's: zlib lets go of the GIL while it
    compresses, so a conversion's Python work goes on meanwhile (its files' compression is a
    tenth of it). Owned by one thread; at most `pending` files' bytes wait. Used as a context: at
    its end every file that can be is written, then the first error is raised (OSError as from
    write_gzip_output)."""

    def __init__(self, pending: int = 4):
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "droidheap-writes")
        self._waiting: Deque[concurrent.futures.Future] = collections.deque()
        self._pending = pending

    def write_gzip(self, path: pathlib.Path, data: bytes) -> None:
        while len(self._waiting) >= self._pending:
            self._waiting.popleft().result()
        self._waiting.append(self._pool.submit(write_gzip_output, path, data))

    def __enter__(self) -> "BackgroundWrites":
        return self

    def __exit__(self, kind, value, traceback) -> None:
        concurrent.futures.wait(self._waiting)
        self._pool.shutdown()
        errors = [f.exception() for f in self._waiting if f.exception() is not None]
        self._waiting.clear()
        if errors and kind is None:  # the block's own error is the one to say
            raise errors[0]


def copy_output(source: pathlib.Path, path: pathlib.Path) -> None:
    with open(source, "rb") as src, open_output(path, "wb") as f:
        shutil.copyfileobj(src, f)


def link_output(source: pathlib.Path, path: pathlib.Path) -> None:
    """`source` at `path` too: a hard link where the file system allows, else a copy."""
    path = pathlib.Path(path)
    while True:
        tmp = _temporary_name(path)
        try:
            os.link(source, tmp, follow_symlinks=False)
            break
        except FileExistsError:
            continue
        except OSError:  # another file system, or one without hard links
            copy_output(source, path)
            return
    _replace(tmp, path)


def make_private_dirs(path: pathlib.Path) -> None:
    """`path` made a directory with every missing parent, as mkdir -p, each made its owner's
    alone (0700) whatever the umask (XDG asks as much of the cache directory it names); one that
    exists is left as it is."""
    path = pathlib.Path(path)
    missing = []
    for directory in (path, *path.parents):
        if os.path.lexists(directory):
            break
        missing.append(directory)
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            continue  # made meanwhile, by another droidheap
        directory.chmod(0o700)  # the umask may have taken bits off mkdir's mode
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a directory")
