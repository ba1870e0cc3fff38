"""The names a device takes from the command line as system property names: bionic's switch for
profiling programs named NAME from their start is the property heapprofd.enable.NAME, set by
root. A name is checked here, as Android's init checks property names (IsLegalPropertyName:
not empty, no '.' at either end, no "..", only letters, digits and `. _ - @ :`), before any
command is built from it -- the commands quote it too, but a name init would refuse can only
fail, so it is refused at once, in one line that names it.

A program's own name (program_name) is what those properties name. -n also takes a glob pattern
(`com.example.*`, as heapprofd's process_cmdline does): it matches running processes only, since
bionic looks a starting program up by its exact name. Pure functions, used from any thread.
"""
import fnmatch
import posixpath
import re
from typing import Dict, List, Sequence

from droidheap.errors import DroidheapError

START_PROPERTY = "heapprofd.enable"
_PROPERTY_WORDS = re.compile(r"[A-Za-z0-9_@:-]+(\.[A-Za-z0-9_@:-]+)*")


def program_name(args: Sequence[str]) -> str:
    """The name bionic matches a program by: basename of argv[0] (a device path, whatever the
    host's), cut at '@'."""
    return posixpath.basename(args[0]).split("@")[0] if args else ""


def is_pattern(name: str) -> bool:
    """Whether -n's `name` is a glob pattern (`*`, `?` or `[...]`): no property name has those."""
    return any(c in name for c in "*?[")


def matching_pids(pattern: str, names: Dict[int, str]) -> List[int]:
    """The pids among `names` ({pid: program name}) whose name `pattern` matches, case and all."""
    return sorted(pid for pid, name in names.items() if fnmatch.fnmatchcase(name, pattern))


def check_property_name(key: str) -> str:
    """`key`, when Android accepts it as a property name; DroidheapError otherwise."""
    if not _PROPERTY_WORDS.fullmatch(key):
        raise DroidheapError(f"{key!r} is not a property name Android accepts (letters, digits "
                             f"and . _ - @ : only, no '..', no '.' at either end)")
    return key


def check_start_name(name: str, instead: str = "") -> None:
    """Raises DroidheapError, naming `name`, when no program named so can be profiled from its
    start: heapprofd.enable.<name> is not a property name. `instead`: what would profile it."""
    if not _PROPERTY_WORDS.fullmatch(name):
        raise DroidheapError(f"{name!r} cannot be profiled from its start: {START_PROPERTY}."
                             f"<name> takes letters, digits and . _ - @ : only (no '..', no '.' "
                             f"at either end)" + (f"; {instead}" if instead else ""))


def start_properties(name: str) -> List[str]:
    """The properties bionic reads at a program's start to load the client into programs named
    `name`."""
    check_start_name(name)
    return [START_PROPERTY, f"{START_PROPERTY}.{name}"]
