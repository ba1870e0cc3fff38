"""`droidheap report`: what one profile says, per process and heap at a chosen dump: the top call
sites by bytes in use and by bytes allocated, the largest of them bottom-up with their callers, the
exact totals, what was lost, what its sweep found unreachable (--unreachable); and over continuous
dumps the leak suspects. As text (text.py) or as JSON for scripts (`report_json`)."""
import dataclasses
from typing import List, Optional, Sequence, Tuple

from droidheap.errors import DroidheapError
from droidheap.results.leaks import leak_suspects
from droidheap.results.model import LeakSuspect, Location, Profile, Unreachable
from droidheap.results.series import by_heap, opening_dumps
from droidheap.results.sites import SiteFigures, TreeNode, bottom_up, top_sites


@dataclasses.dataclass
class ProfileReport:
    profile: Profile
    dumps: int  # how many dumps of this process's heap there are
    seconds: Optional[float]  # since the process's first dump; None when unknown
    by_in_use: List[SiteFigures]
    by_allocated: List[SiteFigures]
    tree: List[TreeNode]  # bottom-up, by bytes in use (allocated, for a profile with none in use)
    swept: Optional[Profile]  # the dump whose sweep's verdict is reported (--unreachable)
    unreachable: List[SiteFigures]  # its sites, by unreachable bytes (in in_use_*)
    exit_dump: Optional[Profile]  # the dump after its exit, when the one reported is another


@dataclasses.dataclass
class Report:
    profiles: List[ProfileReport]
    suspects: List[LeakSuspect]
    warnings: List[str]


def chosen_dumps(profiles: Sequence[Profile], dump: Optional[int] = None) -> List[Profile]:
    """Per process and heap, dump `dump` (by index), or the last one."""
    chosen = {}
    for profile in sorted(profiles, key=lambda p: p.dump_index):
        if dump is None or profile.dump_index == dump:
            chosen[(profile.pid, profile.heap)] = profile
    if profiles and not chosen:
        indices = sorted({p.dump_index for p in profiles})
        raise DroidheapError(f"no dump {dump} (the dumps are {indices[0]} to {indices[-1]})")
    return sorted(chosen.values(), key=lambda p: (p.pid, p.heap != "libc.malloc", p.heap))


def last_sweeps(profiles: Sequence[Profile]) -> List[Profile]:
    """Per process and heap, its last profile whose dump was swept for unreachable memory."""
    return chosen_dumps([p for p in profiles if p.unreachable and p.unreachable.swept])


def last_verdict(series: Sequence[Profile]) -> Optional[Profile]:
    """Of one heap's dumps, the last whose sweep ran (the one as it exited, when it did:
    LeakSanitizer's moment), else the last that says why none ran."""
    said = [p for p in series if p.unreachable]
    return ([p for p in said if p.unreachable.swept] or said or [None])[-1]


def build_report(profiles: Sequence[Profile], warnings: Sequence[str] = (),
                 dump: Optional[int] = None, top: int = 10) -> Report:
    """Of dump `dump` of each process's heap, or of the one it opens on (series.opening_dumps);
    with the verdict of that dump's sweep, or of its program's last."""
    series_of = {id(d): dumps for dumps in by_heap(profiles).values() for d in dumps}
    reports = []
    for profile in opening_dumps(profiles) if dump is None else chosen_dumps(profiles, dump):
        series = series_of[id(profile)]
        first = min((p.timestamp_ns for p in profiles if p.pid == profile.pid and p.timestamp_ns),
                    default=0)
        metric = "in_use_bytes" if profile.in_use_bytes or profile.at_peak else "alloc_bytes"
        swept = last_verdict(series) if dump is None else profile if profile.unreachable else None
        reports.append(ProfileReport(
            profile, sum(p.heap == profile.heap for p in profiles if p.pid == profile.pid),
            (profile.timestamp_ns - first) / 1e9 if first and profile.timestamp_ns else None,
            top_sites(profile.samples, "in_use_bytes", top),
            [] if profile.at_peak else top_sites(profile.samples, "alloc_bytes", top),
            bottom_up(profile.samples, metric, sites=min(top, 5)),
            swept, top_sites(swept.unreachable.samples, "in_use_bytes", top) if swept else [],
            next((d for d in series if d.at_exit and d is not profile), None)))
    return Report(reports, leak_suspects(profiles, top), list(warnings))


def judged_bytes(unreachable: Unreachable) -> Tuple[int, bool]:
    """The unreachable bytes a verdict goes by, and whether they are exact: the sweep's own count
    when every block was known, else what the sampled blocks stand for (scaled)."""
    if unreachable.complete and unreachable.bytes is not None:
        return unreachable.bytes, True
    return unreachable.estimated_bytes, False


def location_json(location: Location) -> dict:
    return {"function": location.function, "file": location.file, "line": location.line,
            "module": location.module}


def _figures_json(figures: SiteFigures) -> dict:
    return {"alloc_count": figures.alloc_count, "alloc_bytes": figures.alloc_bytes,
            "in_use_count": figures.in_use_count, "in_use_bytes": figures.in_use_bytes}


def _site_json(figures: SiteFigures) -> dict:
    return {**location_json(figures.site), **_figures_json(figures)}


def _unreachable_json(r: ProfileReport) -> Optional[dict]:
    """What the dump's sweep found, None when none ran. The sweep's own figures are of the
    sampled blocks as they are (None from a pprof file); the estimates are scaled, as the
    profile's samples."""
    u = r.swept.unreachable if r.swept else None
    if u is None or not u.swept:
        return None
    return {"dump": r.swept.dump_index, "complete": u.complete, "blocks_swept": u.blocks_swept,
            "blocks": u.blocks, "bytes": u.bytes, "held_ns": u.held_ns, "listed_blocks": u.listed_blocks,
            "estimated_count": u.estimated_count,
            "estimated_bytes": u.estimated_bytes, "note": u.note,
            "top_sites": [{**location_json(s.site), "estimated_count": s.in_use_count,
                           "estimated_bytes": s.in_use_bytes} for s in r.unreachable]}


def _tree_json(node: TreeNode) -> dict:
    return {**_site_json(node.figures), "callers": [_tree_json(c) for c in node.children]}


def report_json(report: Report) -> dict:
    """The report as plain data; sizes in bytes, sampled figures are estimates (the sampling
    interval is given), `exact` ones are counted by the daemon."""
    profiles = []
    for r in report.profiles:
        p = r.profile
        totals = None if p.totals is None else {
            "alloc_count": p.totals.alloc_count, "alloc_bytes": p.totals.alloc_bytes,
            "free_count": p.totals.free_count, "free_bytes": p.totals.free_bytes,
            "live_blocks": p.totals.live_blocks, "in_use_bytes": p.totals.in_use_bytes}
        profiles.append({
            "pid": p.pid, "cmdline": p.cmdline, "heap": p.heap, "dump": p.dump_index,
            "dumps": r.dumps, "seconds": r.seconds, "at_peak": p.at_peak, "at_exit": p.at_exit,
            "sampling_interval_bytes": p.sampling_interval_bytes,
            "sampled": {"alloc_count": sum(s.alloc_count for s in p.samples),
                        "alloc_bytes": p.alloc_bytes,
                        "in_use_count": sum(s.in_use_count for s in p.samples),
                        "in_use_bytes": p.in_use_bytes},
            "exact": totals, "samples_lost": list(p.samples_lost),
            "unwinding_errors": p.unwinding_errors, "disconnected": p.disconnected,
            "ending": p.ending,
            "top_sites_by_in_use": [_site_json(s) for s in r.by_in_use],
            "top_sites_by_allocated": [_site_json(s) for s in r.by_allocated],
            "bottom_up": [_tree_json(n) for n in r.tree],
            "unreachable": _unreachable_json(r),
            "exit_dump": None if r.exit_dump is None else {
                "dump": r.exit_dump.dump_index, "in_use_bytes": r.exit_dump.in_use_bytes,
                "in_use_count": sum(s.in_use_count for s in r.exit_dump.samples)},
            "source": p.source})
    suspects = [{"pid": s.pid, "heap": s.heap, **location_json(s.site),
                 "growth_bytes": s.growth_bytes, "steadiness": round(s.steadiness, 3),
                 "in_use_by_dump": s.in_use_by_dump} for s in report.suspects]
    return {"version": 1, "profiles": profiles, "leak_suspects": suspects,
            "warnings": report.warnings}
