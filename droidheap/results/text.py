"""The results as a person reads them in a terminal: the report, what the sweeps found unreachable,
leak suspects, growth between two profiles. Sampled figures are estimates; the report says where a
figure is exact."""
import pathlib
from typing import List, Optional, Sequence

from droidheap.results.diff import SiteGrowth
from droidheap.results.model import LeakSuspect, Profile, Unreachable, ending_note
from droidheap.results.report import ProfileReport, Report, judged_bytes
from droidheap.results.sites import SiteFigures, TreeNode
from droidheap.trace.heap_dumps import size_labels
from droidheap.trace.process_figures import HeapTotals


def human_bytes(count: int) -> str:
    if abs(count) < 1024:
        return f"{count} B"
    value = count / 1024
    for unit in ("KiB", "MiB"):
        if abs(value) < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def sampled_line(heap: str, at_peak: bool, alloc_bytes: int, alloc_count: int,
                 in_use_bytes: int, in_use_count: int, moment: str = "") -> str:
    """The sampled estimate of a heap at a dump (`moment`: " at the last dump", say)."""
    sizes = size_labels(heap)[0]
    if at_peak:  # the peak is the sampled heap's, not necessarily the real heap's
        return (f"  sampled{sizes}: in use at the peak of the sampled heap "
                f"{human_bytes(in_use_bytes)} in {in_use_count} objects")
    return (f"  sampled{sizes}: allocated {human_bytes(alloc_bytes)} in {alloc_count} objects, "
            f"in use{moment} {human_bytes(in_use_bytes)} in {in_use_count} objects")


def exact_line(heap: str, t: HeapTotals) -> str:
    """The daemon's exact counts of a heap, as the summary and the report print them."""
    sizes = size_labels(heap)[1]
    return (f"  exact since profiling began{sizes}: {t.alloc_count} allocations "
            f"({human_bytes(t.alloc_bytes)}), {t.free_count} frees ({human_bytes(t.free_bytes)}); "
            f"{t.live_blocks} blocks, {human_bytes(t.in_use_bytes)} in use")


_NOT_JUDGED = "(blocks not sampled were not judged)"


def unreachable_verdict(u: Unreachable) -> str:
    """What a dump's sweep judged unreachable, in one line: exact when every block was known,
    else an estimate from the sampled blocks alone; then what it did not scan, if anything."""
    if not u.swept:
        return f"not swept: {u.note}" if u.note else "not swept"
    return _judged(u) + (f"; {u.note}" if u.note else "")


def _judged(u: Unreachable) -> str:
    size, exact = judged_bytes(u)
    if exact:
        return (f"{human_bytes(size)} in {u.blocks} blocks, every block known (exact)" if u.blocks
                else "none, every block known (exact)")
    if u.blocks_swept is None:  # a pprof file's: its samples only
        if not u.samples:
            return f"none of the sampled blocks {_NOT_JUDGED}"
        return (f"~{human_bytes(size)} in ~{u.estimated_count} blocks, estimated from the sampled "
                f"blocks {_NOT_JUDGED}")
    # With the allocator's list, pointers were followed through every block: each sampled
    # block's verdict is exact, the total an estimate from them.
    judged = (f"(followed through all {u.listed_blocks} blocks the allocator listed)"
              if u.listed_blocks else _NOT_JUDGED)
    if not u.blocks:
        return f"none of {u.blocks_swept} sampled blocks {judged}"
    return (f"~{human_bytes(size)} estimated from {u.blocks} of {u.blocks_swept} sampled blocks "
            f"{judged}")


def signed_bytes(count: int) -> str:
    return ("+" if count > 0 else "") + human_bytes(count)


def _module_name(path: str) -> str:
    return pathlib.PurePosixPath(path).name


def _site_rows(sites: Sequence[SiteFigures]) -> List[str]:
    rows = [f"  {'in use':>10} {'objects':>8} {'allocated':>10} {'objects':>8}  call site"]
    for s in sites:
        module = f"  [{_module_name(s.site.module)}]" if s.site.module else ""
        rows.append(f"  {human_bytes(s.in_use_bytes):>10} {s.in_use_count:>8} "
                    f"{human_bytes(s.alloc_bytes):>10} {s.alloc_count:>8}  {s.site}{module}")
    return rows


def _tree_rows(node: TreeNode, metric: str, depth: int = 0) -> List[str]:
    value = node.figures.value(metric)
    shown = human_bytes(value) if metric.endswith("bytes") else str(value)
    arrow = "<- " if depth else ""
    rows = [f"  {shown:>10}  {'   ' * depth}{arrow}{node.location}"]
    for child in node.children:
        rows += _tree_rows(child, metric, depth + 1)
    return rows


def _dump_label(p: Profile, dumps: int, seconds: Optional[float]) -> str:
    """Which dump of how many (`dumps` of the process's heap), and when: seconds after the
    process's first dump, which the first has no use for, nor a heap dumped once; and whether it
    is the dump after the exit or at the peak."""
    if dumps == 1:
        return f"{p.series_title}, one dump{p.moment}"
    after = f", {seconds:.1f} s after the first" if seconds else ""
    return f"{p.series_title}, dump {p.dump_index} of {dumps}{after}{p.moment}"


def _profile_block(r: ProfileReport) -> List[str]:
    p = r.profile
    lines = [f"{_dump_label(p, r.dumps, r.seconds)}; "
             f"sampling interval {p.sampling_interval_bytes} B"]
    lines.append(sampled_line(p.heap, p.at_peak, p.alloc_bytes,
                              sum(s.alloc_count for s in p.samples), p.in_use_bytes,
                              sum(s.in_use_count for s in p.samples)))
    if p.totals:
        lines.append(exact_line(p.heap, p.totals))
    lost = ", ".join(p.samples_lost) if p.samples_lost else "none"
    lines.append(f"  samples lost: {lost}; unwinding errors: {p.unwinding_errors}"
                 + (f"; {ending_note(p.disconnected, p.ending)}" if p.disconnected else ""))
    if r.exit_dump:
        e = r.exit_dump
        lines.append(f"  at exit, dump {e.dump_index} (report --dump {e.dump_index}): sampled in "
                     f"use {human_bytes(e.in_use_bytes)} in "
                     f"{sum(s.in_use_count for s in e.samples)} objects")
    if r.by_in_use:
        lines += ["  top call sites by bytes in use:"] + _site_rows(r.by_in_use)
    if r.by_allocated:
        lines += ["  top call sites by bytes allocated:"] + _site_rows(r.by_allocated)
    if r.tree:
        metric = "in_use_bytes" if p.in_use_bytes or p.at_peak else "alloc_bytes"
        what = "bytes in use" if metric == "in_use_bytes" else "bytes allocated"
        lines.append(f"  bottom-up, by {what} (each site, then its callers):")
        for node in r.tree:
            lines += _tree_rows(node, metric)
    if not p.samples:
        lines.append("  no samples")
    return lines


def _unreachable_block(r: ProfileReport) -> List[str]:
    """The verdict of the dump's sweep, then the call sites of the unreachable blocks."""
    p = r.swept
    lines = [f"unreachable (leaked), {p.title}: {unreachable_verdict(p.unreachable)}"]
    if r.unreachable:
        lines.append(f"  {'unreachable':>11} {'blocks':>8}  call site")
    for s in r.unreachable:
        module = f"  [{_module_name(s.site.module)}]" if s.site.module else ""
        lines.append(f"  {human_bytes(s.in_use_bytes):>11} {s.in_use_count:>8}  {s.site}{module}")
    return lines


def format_suspects(suspects: Sequence[LeakSuspect]) -> str:
    """A ranked table of leak suspects, or "" when there are none."""
    if not suspects:
        return ""
    lines = ["leak suspects (bytes in use growing steadily over the dumps):",
             f"  {'growth':>10} {'steady':>6}  call site, process and heap: in use at each dump"]
    for s in suspects:
        shown = s.in_use_by_dump if len(s.in_use_by_dump) <= 6 else (
            s.in_use_by_dump[:3] + [None] + s.in_use_by_dump[-2:])
        series = " ".join("..." if v is None else human_bytes(v) for v in shown)
        lines.append(f"  {signed_bytes(s.growth_bytes):>10} {s.steadiness:>6.0%}  {s.site}, "
                     f"pid {s.pid} heap {s.heap}: {series}")
    return "\n".join(lines)


def format_report(report: Report) -> str:
    if not report.profiles:
        return "No heap dumps: no profiled process allocated while connected."
    blocks = ["\n".join(_profile_block(r)) for r in report.profiles]
    # The sweeps' verdicts, then the suspects: what is proven leaked before what may be.
    blocks += ["\n".join(_unreachable_block(r)) for r in report.profiles if r.swept]
    if report.suspects:
        blocks.append(format_suspects(report.suspects))
    text = "\n\n".join(blocks)
    if report.warnings:
        text += "\n" + "\n".join(f"warning: {w}" for w in report.warnings)
    return text


def format_growth(growth: Sequence[SiteGrowth], base: str, current: str, top: int = 20) -> str:
    if not growth:
        return f"No call site changed between {base} and {current}."
    total = sum(g.in_use_delta for g in growth)
    lines = [f"bytes in use from {base} to {current}: {signed_bytes(total)}",
             f"  {'change':>10} {'before':>10} {'after':>10} {'allocated':>10}  call site"]
    shown = list(growth[:top])
    shown += [g for g in growth[max(top, len(growth) - top // 4):]  # the largest shrinks
              if g.in_use_delta < 0]
    for g in shown:
        lines.append(f"  {signed_bytes(g.in_use_delta):>10} {human_bytes(g.base.in_use_bytes):>10}"
                     f" {human_bytes(g.current.in_use_bytes):>10} {signed_bytes(g.alloc_delta):>10}"
                     f"  {g.site}")
    if len(growth) > len(shown):
        lines.append(f"  ... {len(growth) - len(shown)} more call sites")
    return "\n".join(lines)
