"""The short text summary printed after a profile: per process and heap, what was allocated, what
was still in use at the last dump (sampled, and exactly when the daemon counted it), what the
allocator and the kernel said the process held, what the last sweep for unreachable memory found
(--unreachable), the call sites (sites.py) holding the most memory, and, over continuous dumps, the
leak suspects (leaks.py)."""
import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple, TypeVar

from droidheap.results.from_trace import samples_lost
from droidheap.results.model import (LeakSuspect, Profile, ProgramExit, Unreachable,
                                     ending_note)
from droidheap.results.report import last_verdict
from droidheap.results.sites import SiteFigures, top_sites
from droidheap.results.text import (exact_line, format_suspects, human_bytes, sampled_line,
                                    unreachable_verdict)
from droidheap.trace.process_figures import EXITED, AllocatorStats, HeapTotals
from droidheap.trace.heap_dumps import MALLOC_HEAP, HeapDump, ProcessMemory, TraceDumps

TOP_SITES = 10
# Below this share of what it allocated in use at the last dump (everything freed by the end, as jq
# does; a cache of a few KiB left of 98 MiB, as sqlite3's), a process's call sites are ranked by
# what they allocated: ranked by bytes in use they would say next to nothing.
_LITTLE_IN_USE = 0.05
UNREACHABLE_SITES = 3  # named on the sweep's line


@dataclasses.dataclass
class ProcessSummary:
    pid: int
    cmdline: str
    heap_name: str
    dumps: int  # how many dumps of this heap the trace holds
    sampling_interval_bytes: int
    # From the last dump; cumulative since the process connected.
    allocated: int
    freed: int
    alloc_count: int
    free_count: int
    disconnected: bool
    ending: str  # HeapDump.ending
    samples_lost: Tuple[str, ...]  # why, when samples were lost
    unwinding_errors: int
    top_sites: List[SiteFigures]  # by `ranked_by`, at the last dump
    ranked_by: str  # "in_use_bytes", or "alloc_bytes" when little is in use
    at_peak: bool = False  # the dumps hold the peak's in-use bytes only (--dump-at-max)
    # What the kernel said at the last dump that read it, and when that was if not at the last
    # dump: "as it exited", "at dump 2, 1.5 s before the last".
    memory: Optional[ProcessMemory] = None
    memory_when: str = ""
    program_exit: Optional[ProgramExit] = None  # of a program the host started and saw exit
    # The exact totals and the allocator's figures at the last dump that had them.
    totals: Optional[HeapTotals] = None
    allocator: Optional[AllocatorStats] = None
    # What the last sweep for unreachable memory found (else why the last dump had none), and
    # which dump that was if not the last: "at dump 2".
    unreachable: Optional[Unreachable] = None
    unreachable_when: str = ""

    @property
    def in_use(self) -> int:
        return self.allocated - self.freed


_T = TypeVar("_T")


def _last_known(figures: Sequence[Optional[_T]]) -> Optional[_T]:
    """The latest value of a figure that some dumps lack (a process gone by the dump, an older
    daemon)."""
    return next((f for f in reversed(figures) if f is not None), None)


def _memory_when(read: HeapDump, last: HeapDump) -> str:
    """When the process figures of dump `read` were read, said unless at `last`, the dump shown."""
    if read is not last:
        return (f"at dump {read.index}, {(last.timestamp - read.timestamp) / 1e9:.1f} s before "
                "the last")
    return "as it exited" if last.disconnected and last.ending == EXITED else ""


def summarize(dumps: TraceDumps, profiles: Sequence[Profile],
              program_exits: Optional[Dict[int, ProgramExit]] = None) -> List[ProcessSummary]:
    """`profiles`: the dumps' call stacks, symbolized (results.from_trace.profiles_from_dumps).
    `program_exits`: how the programs the host started and saw exit ended, by pid."""
    by_dump = {(p.pid, p.dump_index, p.heap): p for p in profiles}
    summaries = []
    for pid in sorted(dumps.dumps):
        by_heap: Dict[str, List[HeapDump]] = {}
        for dump in dumps.dumps[pid]:
            by_heap.setdefault(dump.heap_name, []).append(dump)
        # libc's heap first, where the process's own figures print (format_summary).
        for heap, heap_dumps in sorted(by_heap.items(), key=lambda h: (h[0] != MALLOC_HEAP, h[0])):
            last = heap_dumps[-1]
            shown = by_dump.get((pid, last.index, heap)) or Profile(pid, "", heap, 0, 0, 0, [])
            read = _last_known([d if d.memory else None for d in heap_dumps])  # the kernel's
            heap_profiles = [by_dump[pid, d.index, heap] for d in heap_dumps
                             if (pid, d.index, heap) in by_dump]
            swept = last_verdict(heap_profiles)
            little = not last.at_peak and shown.in_use_bytes < _LITTLE_IN_USE * shown.alloc_bytes
            ranked_by = "alloc_bytes" if little else "in_use_bytes"
            summaries.append(ProcessSummary(
                pid=pid, cmdline=dumps.cmdlines.get(pid, ""), heap_name=heap,
                dumps=len(heap_dumps), sampling_interval_bytes=last.sampling_interval_bytes,
                allocated=shown.alloc_bytes, freed=shown.alloc_bytes - shown.in_use_bytes,
                alloc_count=sum(s.alloc_count for s in shown.samples),
                free_count=sum(s.alloc_count - s.in_use_count for s in shown.samples),
                disconnected=last.disconnected, ending=last.ending,
                samples_lost=samples_lost(last),
                unwinding_errors=last.stats.unwinding_errors,
                top_sites=top_sites(shown.samples, ranked_by, limit=TOP_SITES), ranked_by=ranked_by,
                at_peak=last.at_peak,
                memory=read.memory if read else None,
                memory_when=_memory_when(read, last) if read else "",
                program_exit=(program_exits or {}).get(pid),
                totals=_last_known([d.totals for d in heap_dumps]),
                allocator=_last_known([d.allocator for d in heap_dumps]),
                unreachable=swept.unreachable if swept else None,
                unreachable_when=f" at dump {swept.dump_index}" if swept and
                swept.dump_index != last.index else ""))
    return summaries


def _process_lines(s: ProcessSummary) -> List[str]:
    """What the allocator and the kernel said the process held."""
    lines = []
    if s.allocator:
        a = s.allocator
        # The process reports it at most every 100 ms while it samples, and on its exit path
        # unless the read would take too long.
        exited = s.disconnected and s.ending == EXITED
        when = ("as it exited" if exited and not a.not_read_at_exit else
                "as last reported" + (" (not read at exit: too slow)" if exited else ""))
        lines.append(f"  the allocator (mallinfo) {when}: {human_bytes(a.in_use_bytes)} in use, "
                     f"{human_bytes(a.free_bytes)} free, {human_bytes(a.system_bytes)} taken "
                     "from the system")
    if s.memory:
        m = s.memory
        when = f" {s.memory_when}" if s.memory_when else ""
        lines.append(f"  the process{when}: RSS {human_bytes(m.rss_kb * 1024)} (anonymous "
                     f"{human_bytes(m.rss_anon_kb * 1024)}, files "
                     f"{human_bytes(m.rss_file_kb * 1024)}, shared "
                     f"{human_bytes(m.rss_shmem_kb * 1024)}: droidheap's buffer among it), "
                     f"swap {human_bytes(m.swap_kb * 1024)}")
    return lines


def _unreachable_line(u: Unreachable, when: str) -> str:
    """The sweep's verdict, then the call sites of the most unreachable bytes."""
    sites = ", ".join(f"{s.site} {human_bytes(s.in_use_bytes)}"
                      for s in top_sites(u.samples, "in_use_bytes", UNREACHABLE_SITES))
    return f"  unreachable (leaked){when}: {unreachable_verdict(u)}" + (
        f"; top: {sites}" if sites else "")


def format_summary(summaries: List[ProcessSummary], suspects: Sequence[LeakSuspect] = ()) -> str:
    if not summaries:
        return "No heap dumps in the trace: no profiled process allocated while connected."
    blocks = []
    shown = set()  # pids whose process figures are printed
    for s in summaries:
        name = s.cmdline or "?"
        dumps = f"{s.dumps} dump" + ("" if s.dumps == 1 else "s")
        lines = [f"pid {s.pid} ({name}), heap {s.heap_name}, {dumps}, "
                 f"sampling interval {s.sampling_interval_bytes} B"]
        lines.append(sampled_line(s.heap_name, s.at_peak, s.allocated, s.alloc_count, s.in_use,
                                  s.alloc_count - s.free_count, " at the last dump"))
        if s.totals:  # cumulative at the dump, so meaningful beside a peak too
            lines.append(exact_line(s.heap_name, s.totals))
        # mallinfo and RSS are the whole process's, the same beside each of its heaps: once, in
        # its first section, so that they do not read as a custom heap's.
        if s.pid not in shown:
            shown.add(s.pid)
            lines += _process_lines(s)
        # Why samples were lost first: a guardrail's reason, before "its profile ended early".
        notes = [text for flag, text in (
            (s.samples_lost, f"samples were lost ({', '.join(s.samples_lost)})"),
            (s.disconnected, ending_note(s.disconnected, s.ending, s.program_exit)),
            (s.unwinding_errors, f"{s.unwinding_errors} unwinding error"
                                 + ("" if s.unwinding_errors == 1 else "s"))) if flag]
        if notes:
            lines.append("  note: " + "; ".join(notes))
        if s.unreachable:
            lines.append(_unreachable_line(s.unreachable, s.unreachable_when))
        if s.top_sites:
            lines.append("  top call sites by bytes in use:" if s.ranked_by == "in_use_bytes" else
                         f"  top call sites by bytes allocated (little is in use at the last "
                         f"dump: {human_bytes(s.in_use)} of {human_bytes(s.allocated)}):")
            lines.append(f"  {'in use':>10} {'allocated':>10} {'objects':>8}  function")
        for site in s.top_sites:
            lines.append(f"  {human_bytes(site.in_use_bytes):>10} "
                         f"{human_bytes(site.alloc_bytes):>10} {site.alloc_count:>8}  {site.site}")
        blocks.append("\n".join(lines))
    if suspects:
        blocks.append(format_suspects(suspects))
    return "\n\n".join(blocks)
