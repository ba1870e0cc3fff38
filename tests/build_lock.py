"""One builder at a time for each of build/'s trees: the tests run in two processes
(pytest-xdist, scripts/test), and fixtures of both may build the same tree (the native tests'
-m32 build, the Android sysroot) at once. The first builds under the lock; the second, once it
has the lock, finds the tree built and its build step does nothing."""
import contextlib
import fcntl
import pathlib
from typing import Iterator


@contextlib.contextmanager
def build_lock(tree: pathlib.Path) -> Iterator[None]:
    """Holds `tree`'s lock (the file TREE.lock beside it) while the body runs."""
    tree.parent.mkdir(parents=True, exist_ok=True)
    with open(tree.with_name(tree.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
