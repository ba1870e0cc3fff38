"""The data of report.html (html.py renders it): every dump's stacks over one interned table of
frames, each sample booked to its call site, the growth of each process's heap over the dumps,
the leak suspects and, for a diff, the growth per site; for a dump swept for unreachable memory
(--unreachable), the sweep's verdict and the unreachable blocks' stacks, over the same frames and
stacks. The page computes the rest.

The page is what a person reads, of a size a browser opens at once whatever the trace: each
dump shown carries its largest call stacks by each metric; the rest are folded into one row per
call site (their sum, under a frame saying so), so every total and the table of sites stay
exact. The symbolized trace and the pprof files keep every stack.
"""
import collections
import pathlib
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from droidheap.results.diff import SiteGrowth
from droidheap.results.leaks import leak_suspects
from droidheap.results.model import LeakSuspect, Location, Profile, StackSample, ending_note
from droidheap.results.series import by_heap, running
from droidheap.results.sites import CallStack, SiteFigures, profile_sites, site_figures
from droidheap.results.text import unreachable_verdict

VERSION = 2
# Flamegraphs per process's heap: an hour of 5 s dumps would make a page of hundreds of megabytes.
# The growth chart and the leak table still see every dump.
MAX_FLAMEGRAPH_DUMPS = 24
# Per dump shown: the call stacks kept whole, the largest by each metric, and the call sites
# whose folded stacks get a row of their own (the others share one).
STACKS_PER_METRIC = 300
FOLDED_SITES = 300
_METRICS = ("alloc_count", "alloc_bytes", "in_use_count", "in_use_bytes")  # the rows' columns
FOLDED = Location("[smaller call stacks, folded]")
OTHER_SITES = Location("[other call sites]")


class _Frames:
    """Interns Locations as {function, where, module} rows."""

    def __init__(self):
        self.rows: List[dict] = []
        self._ids: Dict[Location, int] = {}
        # By identity first: profiles share their Locations and one CallStack per call stack
        # (from_trace.py, store.py), so each is interned once, not once per sample of every dump.
        self._by_identity: Dict[int, Tuple[Location, int]] = {}
        self._stacks: Dict[int, Tuple[CallStack, int, int]] = {}
        self.stack_rows: List[List[int]] = []

    def id(self, location: Location) -> int:
        known = self._by_identity.get(id(location))
        if known is not None and known[0] is location:
            return known[1]
        if location not in self._ids:
            self._ids[location] = len(self.rows)
            self.rows.append({"function": location.function, "where": location.where,
                              "module": location.module})
        self._by_identity[id(location)] = (location, self._ids[location])
        return self._ids[location]

    def stack(self, stack: CallStack) -> Tuple[int, int]:
        """The stack's index in stack_rows (its frame ids, leaf first) and its call site's id."""
        known = self._stacks.get(id(stack))
        if known is None or known[0] is not stack:
            known = self._stacks[id(stack)] = (stack, self.stack_ids(self.id(f) for f in stack),
                                               self.id(stack.site))
        return known[1], known[2]

    def stack_ids(self, frame_ids) -> int:
        self.stack_rows.append(list(frame_ids))
        return len(self.stack_rows) - 1


def _largest(figures: List[Sequence[int]], limit: int) -> set:
    """Indexes of the `limit` largest of `figures` (rows in _METRICS order) by each metric,
    leaving out those with none of it."""
    chosen = set()
    for column in range(len(_METRICS)):
        values = [row[column] for row in figures]
        ranked = sorted(range(len(values)), key=values.__getitem__, reverse=True)[:limit]
        chosen.update(i for i in ranked if values[i] > 0)
    return chosen


def _rows(samples: List[StackSample], frames: _Frames,
          sites: Callable[[], Dict[Tuple, SiteFigures]]) -> Tuple[List[list], List[str]]:
    """The rows ([stack, site, figures...]) of a profile's samples (`sites`: their figures by
    call site): its largest stacks whole, the others folded per call site, a row each for the
    sites largest by any metric (so the page's table of sites is exact), one for all the others;
    and a note when some were folded."""
    figures = [sample[1:] for sample in samples]  # StackSample: (stack, *figures in _METRICS order)
    kept = _largest(figures, STACKS_PER_METRIC)
    if len(kept) == len(samples):
        return [[*frames.stack(s.stack), *s[1:]] for s in samples], []
    # What is folded into a site's row: the site's figures less those of its stacks kept whole.
    by_site = sites()
    folded = {key: [f.value(metric) for metric in _METRICS] for key, f in by_site.items()}
    rows = []
    for i in sorted(kept):
        sample = samples[i]
        rows.append([*frames.stack(sample.stack), *figures[i]])
        rest = folded[sample.stack.site_key]
        rest[:] = [a - b for a, b in zip(rest, figures[i])]
    sites = [key for key, rest in folded.items() if any(rest)]
    # Rows of their own for the largest sites in all (those the page's table lists).
    own = {sites[i] for i in _largest([[by_site[key].value(m) for m in _METRICS] for key in sites],
                                      FOLDED_SITES // len(_METRICS))}
    others = [0] * len(_METRICS)
    for key in sites:
        if key in own:
            site_id = frames.id(by_site[key].site)
            rows.append([frames.stack_ids([site_id, frames.id(FOLDED)]), site_id, *folded[key]])
        else:
            others = [a + b for a, b in zip(others, folded[key])]
    if any(others):
        site_id = frames.id(OTHER_SITES)
        rows.append([frames.stack_ids([site_id, frames.id(FOLDED)]), site_id, *others])
    return rows, [f"the flamegraph shows {len(kept)} call stacks whole; "
                  f"{len(samples) - len(kept)} smaller ones are folded per call site (every "
                  "total stays exact; the symbolized trace and pprof files hold them all)"]


def _notes(profile: Profile) -> List[str]:
    notes = [f"samples were lost ({', '.join(profile.samples_lost)})"] if profile.samples_lost else []
    if profile.unwinding_errors:
        notes.append(f"{profile.unwinding_errors} unwinding errors")
    if profile.disconnected:
        notes.append(ending_note(profile.disconnected, profile.ending))
    return notes


def _profile_data(profile: Profile, frames: _Frames, start_ns: int, dumps: int) -> dict:
    """`start_ns`: the process's first dump; `dumps`: how many its heap has, shown or not."""
    totals = profile.totals
    rows, folded = _rows(profile.samples, frames, lambda: profile_sites(profile))
    data = {
        "pid": profile.pid, "cmdline": profile.cmdline, "heap": profile.heap,
        "dump": profile.dump_index, "dumps": dumps,
        "time_s": (profile.timestamp_ns - start_ns) / 1e9 if start_ns and profile.timestamp_ns
        else None,
        "at_peak": profile.at_peak, "at_exit": profile.at_exit,
        "sampling_interval": profile.sampling_interval_bytes,
        "totals": None if totals is None else {
            "alloc_count": totals.alloc_count, "alloc_bytes": totals.alloc_bytes,
            "free_count": totals.free_count, "free_bytes": totals.free_bytes,
            "live_blocks": totals.live_blocks, "in_use_bytes": totals.in_use_bytes},
        "notes": _notes(profile) + folded, "samples": rows}
    if profile.unreachable is not None:
        data["unreachable"] = _unreachable_data(profile, frames)
    return data


def _unreachable_data(profile: Profile, frames: _Frames) -> dict:
    """What the dump's sweep found: its verdict, and the unreachable blocks as rows of the
    profile's kind, in the in-use columns."""
    u = profile.unreachable
    # Only what is unreachable, and no allocation figures: the view shows nothing else.
    held = [StackSample(s.stack, 0, 0, s.in_use_count, s.in_use_bytes) for s in u.samples
            if s.in_use_count or s.in_use_bytes]
    rows, folded = _rows(held, frames, lambda: site_figures(held))
    return {"swept": u.swept, "verdict": unreachable_verdict(u), "notes": folded, "samples": rows}


def _shown(profiles: Sequence[Profile]) -> List[Profile]:
    """Per process's heap, at most MAX_FLAMEGRAPH_DUMPS dumps spread evenly over those taken
    while it ran, the last of them always (the page opens there), and the dumps at the peak and at
    exit."""
    shown = []
    for dumps in by_heap(profiles).values():
        ran = running(dumps)
        step = max(1, -(-len(ran) // (MAX_FLAMEGRAPH_DUMPS - 1)))
        shown += ran[::-1][::step][::-1] + [d for d in dumps if d.at_peak or d.at_exit]
    return shown


def _over_time(profiles: Sequence[Profile]) -> List[List[Profile]]:
    """Per process's heap, the dumps its chart of bytes in use draws: those taken while it ran and
    the one after its exit (what its teardown freed shows as the last step); not those at the
    peak, each a moment of its own."""
    return [[d for d in dumps if not d.at_peak] for dumps in by_heap(profiles).values()]


def page_data(profiles: Sequence[Profile], title: str,
              diff: Optional[Tuple[str, str, Sequence[SiteGrowth]]] = None,
              suspects: Optional[Sequence[LeakSuspect]] = None) -> dict:
    """`diff`: (base label, current label, growth per site) for a diff page; `suspects`: the
    profiles' leak_suspects, when the caller has them already."""
    frames = _Frames()
    ordered = sorted(_shown(profiles), key=lambda p: (p.pid, p.heap != "libc.malloc", p.heap,
                                              p.dump_index))
    start_ns = min((p.timestamp_ns for p in profiles if p.timestamp_ns), default=0)
    growth = [{"label": dumps[0].series_title,
               "points": [[(p.timestamp_ns - start_ns) / 1e9 if start_ns else p.dump_index,
                           p.in_use_bytes, p.alloc_bytes] for p in dumps]}
              for dumps in _over_time(profiles) if len(dumps) > 1]
    leaks = [{"label": f"pid {s.pid}, heap {s.heap}", "frame": frames.id(s.site),
              "growth_bytes": s.growth_bytes, "steadiness": s.steadiness,
              "in_use_by_dump": s.in_use_by_dump}
             for s in (leak_suspects(profiles) if suspects is None else suspects)]
    diff_data = None
    if diff is not None:
        base, current, growth_by_site = diff
        diff_data = {"base": base, "current": current, "sites": [
            {"frame": frames.id(g.site), "base_in_use": g.base.in_use_bytes,
             "in_use": g.current.in_use_bytes, "in_use_delta": g.in_use_delta,
             "alloc_delta": g.alloc_delta, "count_delta": g.in_use_count_delta}
            for g in growth_by_site]}
    # As the text report says it: each process's time from its own first dump.
    process_start = {}
    for p in profiles:
        if p.timestamp_ns:
            process_start[p.pid] = min(p.timestamp_ns, process_start.get(p.pid, p.timestamp_ns))
    dumps = collections.Counter((p.pid, p.heap) for p in profiles)
    return {"version": VERSION, "title": title,
            "profiles": [_profile_data(p, frames, process_start.get(p.pid, 0),
                                       dumps[p.pid, p.heap]) for p in ordered],
            "growth": growth, "leaks": leaks, "diff": diff_data, "frames": frames.rows,
            "stacks": frames.stack_rows}


def page_title(profiles: Sequence[Profile], fallback: str) -> str:
    names = sorted({pathlib.PurePosixPath(p.cmdline.split(" ")[0]).name
                    for p in profiles if p.cmdline})
    return "droidheap: " + (", ".join(names[:3]) + (" ..." if len(names) > 3 else "")
                            if names else fallback)
