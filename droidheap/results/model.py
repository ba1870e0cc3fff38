"""The profile as the reports see it, whatever it was read from: per process, heap and dump, its
call stacks already symbolized (inline frames expanded), with what each allocated and still held.

A trace gives everything; a pprof only the stacks and values (figures such as the exact totals and
the unwinding errors are then None or 0).
"""
import dataclasses
import operator
import pathlib
from typing import List, NamedTuple, Optional, Tuple

from droidheap.trace.process_figures import (CONNECTION_LOST, CUT_OFF, EXECED, EXITED, GUARDRAIL,
                                             HeapTotals)


@dataclasses.dataclass(frozen=True)
class Location:
    """One frame as a person reads it; an inlined function is a Location of its own."""
    function: str
    file: str = ""
    line: int = 0
    module: str = ""  # the mapped file's path; "" when unknown

    @property
    def where(self) -> str:
        """`file.cc:12`, the file's name only, or ""."""
        if not self.file:
            return ""
        name = pathlib.PurePosixPath(self.file).name
        return f"{name}:{self.line}" if self.line else name

    def __str__(self) -> str:
        return f"{self.function} ({self.where})" if self.where else self.function


class StackSample(NamedTuple):
    """One call stack's figures, cumulative since the process connected (sampled estimates). A
    tuple, `sample[1:]` its figures: a trace has one per call stack of every dump."""
    # Leaf (innermost: the caller of malloc) first; a sites.CallStack, one per distinct stack.
    stack: Tuple[Location, ...]
    alloc_count: int = 0
    alloc_bytes: int = 0
    in_use_count: int = 0
    in_use_bytes: int = 0


@dataclasses.dataclass
class Unreachable:
    """What the sweep for unreachable memory found at a profile's dump (`droidheap --unreachable`,
    libc's heap only): the live blocks nothing in the process points at, by call stack.

    `samples` are scaled estimates, as a profile's are, with the unreachable blocks and bytes in
    in_use_count and in_use_bytes (alloc_* the same figures again). The other figures are the sweep's own, of the
    sampled blocks as they are (not scaled); None where the source does not say (a pprof file)."""
    samples: List[StackSample]
    # Every live block was known (every allocation sampled, from the process's start): the
    # verdict is exact, LeakSanitizer's. Else only sampled blocks were judged; never a false
    # positive.
    complete: bool = False
    swept: bool = True  # False: no sweep ran at this dump, `note` says why
    blocks_swept: Optional[int] = None  # the live sampled blocks judged
    blocks: Optional[int] = None  # of them, unreachable
    bytes: Optional[int] = None   # the bytes those blocks' callers asked for
    held_ns: Optional[int] = None  # how long the process's threads were held for its copy
    # Blocks the allocator listed (bionic's), pointers followed through them all: then each
    # sampled block's verdict is LeakSanitizer's, a dropped list or cycle found whole. 0: only
    # the sampled blocks were followed; None: not said.
    listed_blocks: Optional[int] = None
    note: str = ""  # what was not scanned, or why no sweep ran; "" when everything was

    @property
    def estimated_bytes(self) -> int:
        """The unreachable bytes the samples stand for (scaled)."""
        return sum(map(_IN_USE_BYTES, self.samples))

    @property
    def estimated_count(self) -> int:
        return sum(s.in_use_count for s in self.samples)


_ALLOC_BYTES = operator.attrgetter("alloc_bytes")
_IN_USE_BYTES = operator.attrgetter("in_use_bytes")


@dataclasses.dataclass
class Profile:
    """One heap of one process at one dump."""
    pid: int
    cmdline: str
    heap: str
    dump_index: int
    timestamp_ns: int  # monotonic, comparable between dumps of one trace; 0 when unknown
    sampling_interval_bytes: int
    samples: List[StackSample]
    at_peak: bool = False  # in-use bytes at the sampled heap's peak; nothing known of allocations
    # From a trace only.
    totals: Optional[HeapTotals] = None
    unwinding_errors: int = 0
    samples_lost: Tuple[str, ...] = ()  # why samples were lost ("the buffer overran", ...)
    disconnected: bool = False
    ending: str = ""  # how a disconnected process's profile ended (HeapDump.ending)
    unreachable: Optional[Unreachable] = None  # libc's heap, with --unreachable
    source: str = ""  # the file it was read from
    # Its figures by call site (sites.profile_sites), made once, when first asked.
    sites: Optional[dict] = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def alloc_bytes(self) -> int:
        return sum(map(_ALLOC_BYTES, self.samples))  # a C loop: a dump has thousands

    @property
    def in_use_bytes(self) -> int:
        return sum(map(_IN_USE_BYTES, self.samples))

    @property
    def series_title(self) -> str:
        """Which process's heap, whatever the dump."""
        name = self.cmdline.split(" ")[0] if self.cmdline else "?"
        return f"pid {self.pid} ({name}), heap {self.heap}"

    @property
    def at_exit(self) -> bool:
        """Taken after the process was gone (it exited, exec'd another program, or its connection
        was lost: a crash, a kill, _exit): what it left, once its teardown had freed what it
        frees; not a moment of its run (results/series.py). A profile a guardrail ended, or cut off, ends while the process
        runs on: its last dump is a moment of the run. A dump at the peak holds the peak
        whenever it was taken."""
        return self.disconnected and not self.at_peak and self.ending not in (GUARDRAIL, CUT_OFF)

    @property
    def moment(self) -> str:
        """What the dump's labels add to its number: " (at exit)", " (peak)", or ""."""
        return " (at exit)" if self.at_exit else " (peak)" if self.at_peak else ""

    @property
    def dump_name(self) -> str:
        return f"dump {self.dump_index}{self.moment}"

    @property
    def title(self) -> str:
        return f"{self.series_title}, {self.dump_name}"


class ProgramExit(NamedTuple):
    """How a program the host started ended, as a shell says it."""
    status: int  # 128+N when signal N ended it
    # What made droidheap stop it ("Ctrl-C", "SIGTERM"), when droidheap did; "" when it ended
    # by itself.
    stopped_at: str = ""

    def __str__(self) -> str:
        said = f"the process exited with status {self.status}"
        return f"droidheap stopped it at {self.stopped_at}: {said}" if self.stopped_at else said


def ending_note(disconnected: bool, ending: str, program_exit: Optional[ProgramExit] = None) -> str:
    """What became of a process gone by its last dump (`ending`: Profile.ending), for a note; ""
    for one still connected. `program_exit`: what the host saw of a program it started."""
    if not disconnected:
        return ""
    status = str(program_exit or "")
    if ending == EXITED:
        return status or "the process exited"
    if ending == EXECED:  # a wrapper (env, taskset) or a shell's last command, say
        return ("it exec'd another program, which its profile ends at (the program is profiled "
                "from its start when the session takes it)" + (f"; {status}" if status else ""))
    if ending == GUARDRAIL:  # samples_lost says which, before this
        return "its profile ended early" + (f"; {status}" if status else "")
    if ending == CUT_OFF:
        return ("droidheapd cut its profile off: it kept its buffer from being read in time "
                "(droidheapd.log says how long)" + (f"; {status}" if status else ""))
    if ending == CONNECTION_LOST:
        if program_exit and program_exit.stopped_at:  # no mystery: droidheap ended it
            return status
        if program_exit and 128 < program_exit.status <= 128 + 64:  # as a shell says a signal
            return (f"signal {program_exit.status - 128} ended it before droidheap's exit path "
                    f"ran ({status})")
        if program_exit:  # a shell (dash), or anything else that leaves through _exit
            return f"it exited without droidheap's exit path, as _exit does ({status})"
        return ("its connection was lost before the process exited normally (" +
                (status or "a crash, a kill, _exit or a closed socket") + ")")
    # An older daemon's trace, or heapprofd's: either.
    return status or "the process exited or its connection was lost"


@dataclasses.dataclass
class LeakSuspect:
    """A call site whose bytes in use grew steadily over the continuous dumps of one process's
    heap (not in one jump)."""
    pid: int
    heap: str
    site: Location  # the leaf: the caller of the allocator
    in_use_by_dump: List[int]  # bytes in use at the site at each dump, in dump order
    growth_bytes: int  # last dump minus first
    steadiness: float  # 0..1: the share of dump-to-dump steps in which it grew
    score: float  # what suspects are ranked by, highest first


@dataclasses.dataclass
class Results:
    """What the reports read: every profile, and what reading them warned of."""
    profiles: List[Profile]  # by pid, then dump, then heap (libc's first)
    warnings: List[str]
