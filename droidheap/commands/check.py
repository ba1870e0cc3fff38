"""`droidheap check OUT [--max-growth BYTES] [--max-unreachable BYTES] [--site REGEX]`: a gate for
CI. Exits 1, naming each call site whose bytes in use grew past the bound while the program ran
(from its first dump to its last before the exit, from when profiling began for a single dump,
or to the peak: results/series.py), or each process whose last sweep found more unreachable
bytes than the bound, with the call sites holding the most of them. Exits 2 when it cannot judge
(a bad flag, OUT missing or damaged, a dump or sweep not there), as diff(1) and grep(1) do: a CI
script tells a regression from a broken run."""
import functools
import re
from typing import List, Optional, Tuple

import click

from droidheap.commands.output import symbols_option
from droidheap.commands.reading import (growth_within, load, path_argument, say_warnings,
                                        span_options)
from droidheap.errors import DroidheapError
from droidheap.gc_pause import gc_paused

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}
_UNREACHABLE_SITES = 3  # named in a failure
GATE_FAILED, NOT_JUDGED = 1, 2  # exit codes; click's usage errors are 2 already


class ByteSize(click.ParamType):
    """A size in bytes: 4096, 64k, 1.5MiB (k, M and G are powers of 1024)."""
    name = "bytes"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", value)
        if not match or match[2].lower() not in _UNITS:
            self.fail(f"{value!r} is not a size (e.g. 4096, 64k, 1.5MiB)", param, ctx)
        return int(float(match[1]) * _UNITS[match[2].lower()])


class Pattern(click.ParamType):
    name = "regex"

    def convert(self, value, param, ctx):
        try:
            return re.compile(value)
        except re.error as e:
            self.fail(f"{value!r} is not a regular expression: {e}", param, ctx)


def _matches(pattern, site) -> bool:
    return any(pattern.search(text) for text in (str(site), site.file, site.module) if text)


def _growth_gate(path, profiles, max_growth: int, site_pattern,
                 span: Tuple[Optional[int], Optional[int]]) -> Tuple[List[str], str]:
    """(what failed, or else what passed); `span`: --from and --to."""
    from droidheap.results.text import human_bytes, signed_bytes
    series = growth_within(path, profiles, *span)
    if not series:
        raise DroidheapError(f"{path} has no dumps to check")
    failed, largest = [], None
    for s in series:
        between = (f"from {s.base.dump_name if s.base else 'the start of profiling'} to "
                   f"{s.current.dump_name}")
        for g in s.growth:
            if site_pattern and not _matches(site_pattern, g.site):
                continue
            if largest is None or g.in_use_delta > largest[0].in_use_delta:
                largest = (g, s, between)
            if g.in_use_delta > max_growth:
                failed.append(f"{g.site} grew by {human_bytes(g.in_use_delta)} in "
                              f"{s.current.series_title} {between} (bound "
                              f"{human_bytes(max_growth)})")
    if largest is None:
        return failed, "no call site matched" if site_pattern else "nothing was allocated"
    g, s, between = largest
    return failed, (f"no call site grew by more than {human_bytes(max_growth)}; the most, "
                    f"{signed_bytes(g.in_use_delta)}, was {g.site} in {s.current.series_title} "
                    f"{between}")


def _unreachable_gate(path, profiles, max_unreachable: int, site_pattern) -> Tuple[List[str], str]:
    """(what failed, or else what passed): per process and heap, its last sweep. Its bytes are
    exact when every block was known, else an estimate; with --site, its matching sites'."""
    from droidheap.results.report import judged_bytes, last_sweeps
    from droidheap.results.sites import top_sites
    from droidheap.results.text import human_bytes
    sweeps = last_sweeps(profiles)
    if not sweeps:
        raise DroidheapError(f"{path} has no sweep for unreachable memory (profile with "
                             "--unreachable)")
    failed, largest = [], None
    for p in sweeps:
        u = p.unreachable
        sites = [s for s in top_sites(u.samples, "in_use_bytes", limit=len(u.samples))
                 if not site_pattern or _matches(site_pattern, s.site)]
        size, exact = judged_bytes(u)
        if site_pattern:
            size = sum(s.in_use_bytes for s in sites)
        how = "" if exact else " (estimated)"
        if largest is None or size > largest[0]:
            largest = (size, how, p)
        if size > max_unreachable:
            named = ", ".join(f"{s.site} {human_bytes(s.in_use_bytes)}"
                              for s in sites[:_UNREACHABLE_SITES])
            failed.append(f"{human_bytes(size)}{how} unreachable in {p.title} (bound "
                          f"{human_bytes(max_unreachable)})" + (f": {named}" if named else ""))
    size, how, p = largest
    if not size:
        return failed, ("the sweeps found nothing unreachable" +
                        (" at a matching call site" if site_pattern else "") +
                        (" among the sampled blocks" if how else ""))
    return failed, (f"no process held more than {human_bytes(max_unreachable)} unreachable; the "
                    f"most, {human_bytes(size)}{how}, in {p.title}")


def _not_judged_exits_2(function):
    """`function`, with the errors that keep it from judging (what reading OUT or the gates
    raise) exiting NOT_JUDGED instead of every other command's 1."""
    @functools.wraps(function)
    def run(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except DroidheapError as e:
            raise DroidheapError(e.message, NOT_JUDGED) from e
        except OSError as e:  # as the top level would say it
            raise DroidheapError(str(e), NOT_JUDGED) from e
    return run


@click.command("check")
@path_argument
@click.option("--max-growth", type=ByteSize(), default=None, metavar="BYTES",
              help="Fail when a call site's bytes in use grew by more (4096, 64k, 1.5MiB).")
@click.option("--max-unreachable", type=ByteSize(), default=None, metavar="BYTES",
              help="Fail when a process's last sweep (--unreachable) found more bytes "
                   "unreachable.")
@click.option("--site", "site_pattern", type=Pattern(), default=None, metavar="REGEX",
              help="Check only the call sites whose name, file or module matches.")
@span_options
@symbols_option
@click.pass_context
@gc_paused
@_not_judged_exits_2
def command(ctx, path, max_growth, max_unreachable, site_pattern, base_dump, current_dump,
            symbol_dirs):
    """Exit 1 when a call site in PATH grew past --max-growth while the program ran (first dump
    to last before its exit; --from and --to choose other dumps), or a process's last sweep found
    more unreachable memory than --max-unreachable; exit 2 when PATH cannot be judged (missing,
    damaged, no such dump) or a flag is wrong."""
    if max_growth is None and max_unreachable is None:
        raise click.UsageError("give --max-growth, --max-unreachable or both")
    if max_growth is None and (base_dump, current_dump) != (None, None):
        raise click.UsageError("--from and --to choose the dumps --max-growth compares")
    results = load(path, symbol_dirs)
    say_warnings(results)
    gates = []
    if max_growth is not None:
        gates.append(_growth_gate(path, results.profiles, max_growth, site_pattern,
                                  (base_dump, current_dump)))
    if max_unreachable is not None:
        gates.append(_unreachable_gate(path, results.profiles, max_unreachable, site_pattern))
    for failed, _ in gates:
        for line in failed:
            click.echo(f"FAIL: {line}")
    for failed, passed in gates:
        if not failed:
            click.echo(f"ok: {passed}")
    if any(failed for failed, _ in gates):
        ctx.exit(GATE_FAILED)
