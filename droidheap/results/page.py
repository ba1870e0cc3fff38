"""The data of report.html (html.py renders it): every dump's stacks over one interned table of
frames, each sample booked to its call site, the growth of each process's heap over the dumps,
the leak suspects and, for a diff, the growth per site. The page computes the rest."""
import pathlib
from typing import Dict, List, Optional, Sequence, Tuple

from droidheap.results.diff import SiteGrowth
from droidheap.results.leaks import dump_series, leak_suspects
from droidheap.results.load import ending_note
from droidheap.results.model import Location, Profile
from droidheap.results.sites import call_site

VERSION = 1
# Flamegraphs per process's heap: an hour of 5 s dumps would make a page of hundreds of megabytes.
# The growth chart and the leak table still see every dump.
MAX_FLAMEGRAPH_DUMPS = 24


class _Frames:
    """Interns Locations as {function, where, module} rows."""

    def __init__(self):
        self.rows: List[dict] = []
        self._ids: Dict[Location, int] = {}
        # By the stack tuple's identity: profiles share one tuple per call stack (load.py), so
        # each is interned once, not once per sample of every dump.
        self._stacks: Dict[int, Tuple[Tuple[Location, ...], List[int], int]] = {}

    def id(self, location: Location) -> int:
        if location not in self._ids:
            self._ids[location] = len(self.rows)
            self.rows.append({"function": location.function, "where": location.where,
                              "module": location.module})
        return self._ids[location]

    def stack(self, stack: Tuple[Location, ...]) -> Tuple[List[int], int]:
        """The stack's frame ids, leaf first, and its call site's."""
        known = self._stacks.get(id(stack))
        if known is None or known[0] is not stack:
            known = self._stacks[id(stack)] = (stack, [self.id(f) for f in stack],
                                               self.id(call_site(stack)))
        return known[1], known[2]


def _notes(profile: Profile) -> List[str]:
    notes = [f"samples were lost ({', '.join(profile.samples_lost)})"] if profile.samples_lost else []
    if profile.unwinding_errors:
        notes.append(f"{profile.unwinding_errors} unwinding errors")
    if profile.disconnected:
        notes.append(ending_note(profile.disconnected, profile.ending))
    return notes


def _profile_data(profile: Profile, frames: _Frames, start_ns: int) -> dict:
    totals = profile.totals
    return {
        "pid": profile.pid, "cmdline": profile.cmdline, "heap": profile.heap,
        "dump": profile.dump_index,
        "time_s": (profile.timestamp_ns - start_ns) / 1e9 if start_ns and profile.timestamp_ns
        else None,
        "at_peak": profile.at_peak, "sampling_interval": profile.sampling_interval_bytes,
        "totals": None if totals is None else {
            "alloc_count": totals.alloc_count, "alloc_bytes": totals.alloc_bytes,
            "free_count": totals.free_count, "free_bytes": totals.free_bytes,
            "live_blocks": totals.live_blocks, "in_use_bytes": totals.in_use_bytes},
        "notes": _notes(profile),
        "samples": [[*frames.stack(s.stack), s.alloc_count, s.alloc_bytes, s.in_use_count,
                     s.in_use_bytes] for s in profile.samples]}


def _shown(profiles: Sequence[Profile]) -> List[Profile]:
    """Per process's heap, at most MAX_FLAMEGRAPH_DUMPS dumps spread evenly, the last always."""
    shown = [p for p in profiles if p.at_peak]
    for dumps in dump_series(profiles).values():
        step = max(1, -(-len(dumps) // MAX_FLAMEGRAPH_DUMPS))
        shown += dumps[::-1][::step][::-1]
    return shown


def page_data(profiles: Sequence[Profile], title: str,
              diff: Optional[Tuple[str, str, Sequence[SiteGrowth]]] = None) -> dict:
    """`diff`: (base label, current label, growth per site) for a diff page."""
    frames = _Frames()
    ordered = sorted(_shown(profiles), key=lambda p: (p.pid, p.heap != "libc.malloc", p.heap,
                                              p.dump_index))
    start_ns = min((p.timestamp_ns for p in profiles if p.timestamp_ns), default=0)
    growth = [{"label": dumps[0].series_title,
               "points": [[(p.timestamp_ns - start_ns) / 1e9 if start_ns else p.dump_index,
                           p.in_use_bytes, p.alloc_bytes] for p in dumps]}
              for dumps in dump_series(profiles).values() if len(dumps) > 1]
    leaks = [{"label": f"pid {s.pid}, heap {s.heap}", "frame": frames.id(s.site),
              "growth_bytes": s.growth_bytes, "steadiness": s.steadiness,
              "in_use_by_dump": s.in_use_by_dump} for s in leak_suspects(profiles)]
    diff_data = None
    if diff is not None:
        base, current, growth_by_site = diff
        diff_data = {"base": base, "current": current, "sites": [
            {"frame": frames.id(g.site), "base_in_use": g.base.in_use_bytes,
             "in_use": g.current.in_use_bytes, "in_use_delta": g.in_use_delta,
             "alloc_delta": g.alloc_delta, "count_delta": g.in_use_count_delta}
            for g in growth_by_site]}
    return {"version": VERSION, "title": title,
            "profiles": [_profile_data(p, frames, start_ns) for p in ordered],
            "growth": growth, "leaks": leaks, "diff": diff_data, "frames": frames.rows}


def page_title(profiles: Sequence[Profile], fallback: str) -> str:
    names = sorted({pathlib.PurePosixPath(p.cmdline.split(" ")[0]).name
                    for p in profiles if p.cmdline})
    return "droidheap: " + (", ".join(names[:3]) + (" ..." if len(names) > 3 else "")
                            if names else fallback)
