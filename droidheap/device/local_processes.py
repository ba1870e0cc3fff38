"""This machine's processes as the emulator device (local.py) sees them: their arguments, with a
qemu-user launcher taken off so that an emulated program is known by its own name, as droidheapd
knows it (daemon/process_matcher.cc); their program names; the droidheapd processes of a device
root. Read from /proc, from any thread."""
import os
import pathlib
from typing import Dict, List

from droidheap.device.names import program_name

# qemu-user options that take a value: the first other word is the emulated program.
_QEMU_VALUE_OPTIONS = {"-L", "-E", "-U", "-cpu", "-g", "-s", "-R", "-B", "-d", "-D", "-p", "-r",
                       "-0", "-seed", "-trace", "-plugin", "-dfilter", "-t"}


def program_arguments(pid: int) -> List[str]:
    """A process's arguments, without a qemu-user launcher in front."""
    try:
        raw = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    args = [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]
    if args and os.path.basename(args[0]).startswith("qemu-"):
        i = 1
        while i < len(args) and args[i].startswith("-") and len(args[i]) > 1:
            i += 2 if args[i] in _QEMU_VALUE_OPTIONS else 1
        args = args[i:]
    return args


def host_program_names() -> Dict[int, str]:
    """{pid: program name} of this machine's processes (this one left out)."""
    names = {}
    for pid in host_pids():
        name = program_name(program_arguments(pid))
        if name:
            names[pid] = name
    return names


def running_daemons(daemon: str) -> List[int]:
    """The processes running the droidheapd at path `daemon` (directly or under qemu-user)."""
    return [pid for pid in host_pids() if program_arguments(pid)[:1] == [daemon]]


def host_pids() -> List[int]:
    """This machine's processes, this one left out."""
    return [int(entry.name) for entry in pathlib.Path("/proc").iterdir()
            if entry.name.isdigit() and int(entry.name) != os.getpid()]
