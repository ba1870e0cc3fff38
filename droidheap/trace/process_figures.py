"""What the counter tracks beside a process's dumps say (counter_tracks.py reads them), as plain
data the reports use without reading a trace: the exact totals of a heap, what the allocator
holds, how a profile ended, and what the sweep for unreachable memory did."""
import dataclasses

EXITED, GUARDRAIL, CONNECTION_LOST = "process exited", "profile ended", "connection lost"
CUT_OFF = "profile cut off"  # the process kept droidheapd from reading its buffer in time
EXECED = "process exec'd"  # it runs another program now: its client's socket closed on exec
ENDINGS = (EXITED, GUARDRAIL, CONNECTION_LOST, CUT_OFF, EXECED)


@dataclasses.dataclass(frozen=True)
class HeapTotals:
    """Every allocation and free of one heap since profiling of the process began, counted exactly
    (not sampled), bytes at usable sizes (what the allocator handed out)."""
    alloc_count: int
    alloc_bytes: int
    free_count: int
    free_bytes: int

    # Only of a process profiled from its start: one attached while running frees blocks older
    # than the attach too, which droidheapd writes apart ("frees (older blocks too)"), so that no
    # totals of it are read. (Traces of droidheap before that wrote them as these: there what is
    # in use can read negative.)
    @property
    def in_use_bytes(self) -> int:
        return self.alloc_bytes - self.free_bytes

    @property
    def live_blocks(self) -> int:
        return self.alloc_count - self.free_count


@dataclasses.dataclass(frozen=True)
class AllocatorStats:
    """What the allocator says (mallinfo), as the process last reported it: at most every 100 ms
    while it allocates (less often when the read is slow), and at exit unless the read would have
    taken too long."""
    in_use_bytes: int  # in allocated blocks
    free_bytes: int    # free inside the allocator
    system_bytes: int  # taken from the system
    not_read_at_exit: bool = False  # the process exited, and these are older than its exit


@dataclasses.dataclass(frozen=True)
class UnreachableSweep:
    """The figures of the latest sweep for unreachable memory (--unreachable) at a dump, of the
    sampled blocks as they are (not scaled); its blocks by call stack are a heap of the dump."""
    swept: bool  # False: no sweep ran, `note` says why
    blocks_swept: int = 0
    blocks: int = 0
    bytes: int = 0  # what the unreachable blocks' callers asked for
    held_ns: int = 0  # the process's threads held for its copy
    note: str = ""  # what was not scanned, or why no sweep ran
    # The heap's blocks as its allocator listed them (bionic's malloc_iterate), pointers followed
    # through them all; 0 when it did not list them (the sampled blocks alone were followed).
    listed_blocks: int = 0
