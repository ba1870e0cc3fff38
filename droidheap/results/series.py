"""Which dumps of one process's heap growth is measured over: `diff OUT`, `check --max-growth`,
the leak suspects and the dump report.html opens on.

A run with continuous dumps (-c) has the dumps taken while the program ran and, when it ends, one
more after it exited: what it left once its teardown had freed what it frees (heaptrack's
"leaked"; heapprofd's last dump, flagged as its client disconnected). A heaptrack or heapprofd
user reads growth as what the program took on while it ran: so growth runs from the first
running dump to the last one. Measured to the exit dump instead, a program that frees everything
at exit (a Python interpreter, jq) shows every site shrinking however much it grew. The exit
dump stays in every listing, named "at exit", and can be asked for by number
(`--from`/`--to`, `report --dump`).

With one running dump, growth is from the start of profiling to it; with only the exit dump (a
run without -c), to that one, as there is nothing else. Dumps at the peak (--dump-at-max,
heapprofd's dump_at_max) each hold what was in use when the sampled heap was largest so far:
growth is from the start to the last of them, the run's peak (taken at exit or not).
"""
from typing import Dict, List, Optional, Sequence, Tuple

from droidheap.errors import DroidheapError
from droidheap.results.model import Profile
from droidheap.trace.process_figures import EXECED

Span = Tuple[Optional[Profile], Profile]  # (base, current); base None: the start of profiling


def by_heap(profiles: Sequence[Profile]) -> Dict[Tuple[int, str, int], List[Profile]]:
    """Every dump of each process's heap and program, in dump order, by (pid, heap, the execs
    before it): a process that exec'd runs another program, whose dumps are a series of their own
    (`env prog`, a shell's `exec prog`, pyenv's shims exec'ing one another)."""
    series: Dict[Tuple[int, str, int], List[Profile]] = {}
    execs: Dict[Tuple[int, str], int] = {}
    for profile in sorted(profiles, key=lambda p: (p.pid, p.heap, p.dump_index)):
        key = (profile.pid, profile.heap)
        series.setdefault((*key, execs.get(key, 0)), []).append(profile)
        if profile.disconnected and profile.ending == EXECED:
            execs[key] = execs.get(key, 0) + 1
    return series


def opening_dumps(profiles: Sequence[Profile]) -> List[Profile]:
    """Per process and heap, the dump a report opens on (`report`, report.html, each side of
    `diff A B`): the last its program took while it ran, or at its peak; the one after its exit
    only when there is no other (a run without -c). Of a process that exec'd, its last program's."""
    last_series: Dict[Tuple[int, str], List[Profile]] = {}
    for (pid, heap, _), dumps in sorted(by_heap(profiles).items()):
        last_series[pid, heap] = dumps
    return [([d for d in dumps if not d.at_exit] or dumps)[-1] for dumps in last_series.values()]


def running(dumps: Sequence[Profile]) -> List[Profile]:
    """Of one heap's dumps, those taken while the process ran: a series (not at the peak, each
    a moment of its own) that ends before the exit dump."""
    return [d for d in dumps if not d.at_peak and not d.at_exit]


def growth_span(dumps: Sequence[Profile]) -> Span:
    """The dumps growth of one process's heap is measured between (`dumps`: all of them, in dump
    order), as the module says."""
    peaks = [d for d in dumps if d.at_peak]
    if peaks:
        return None, peaks[-1]
    ran = running(dumps)
    if len(ran) > 1:
        return ran[0], ran[-1]
    return None, (ran or dumps)[-1]


def chosen_span(dumps: Sequence[Profile], base_index: Optional[int],
                current_index: Optional[int]) -> Optional[Span]:
    """growth_span, with an end replaced by the dump of that number when one is given; None when
    the heap has no dump of a number given. Given only the current end, the base is still the
    first running dump when that comes before it, else the start of profiling."""
    base, current = growth_span(dumps)
    numbered = {d.dump_index: d for d in dumps}
    if any(i is not None and i not in numbered for i in (base_index, current_index)):
        return None
    if current_index is not None:
        current = numbered[current_index]
        if base is not None and base.dump_index >= current_index:
            base = None
    if base_index is not None:
        base = numbered[base_index]
    return base, current


def spans(profiles: Sequence[Profile], base_index: Optional[int] = None,
          current_index: Optional[int] = None,
          path: str = "the profile") -> Tuple[List[Span], List[str]]:
    """Per process and heap, the span its growth is measured over (chosen_span), and the series
    left out for lacking a dump asked for (their series_title). Dumps no process has (both of)
    are an error naming the dumps there are."""
    chosen, left_out = [], []
    for dumps in by_heap(profiles).values():
        span = chosen_span(dumps, base_index, current_index)
        if span is None:
            left_out.append(dumps[0].series_title)
        else:
            chosen.append(span)
    if profiles and not chosen:
        asked = [f"dump {i}" for i in (base_index, current_index) if i is not None]
        what = (f"no process with both {asked[0]} and {asked[1]}" if len(asked) == 2
                else f"no {asked[0]}")
        raise DroidheapError(f"{path} has {what} ({dumps_there_are(profiles)})")
    return chosen, left_out


def dumps_there_are(profiles: Sequence[Profile]) -> str:
    """The dump numbers of each process, for an error: "dumps 0 to 3 and dump 4 at exit", after
    "pid N: " when there are several processes."""
    by_pid: Dict[int, Dict[int, Profile]] = {}
    for p in profiles:  # the heaps of one dump share its number, and whether it is at exit
        by_pid.setdefault(p.pid, {})[p.dump_index] = p
    said = []
    for pid, numbered in sorted(by_pid.items()):
        dumps = [numbered[i] for i in sorted(numbered)]
        kinds = [(running(dumps), ""), ([d for d in dumps if d.at_peak], " at the peak"),
                 ([d for d in dumps if d.at_exit], " at exit")]
        text = " and ".join(_numbers([d.dump_index for d in kind]) + what for kind, what in kinds
                         if kind)
        said.append(f"pid {pid}: {text}" if len(by_pid) > 1 else text)
    return "; ".join(said)


def _numbers(indices: List[int]) -> str:
    """'dump 4', 'dumps 0 to 3' when they run on, else 'dumps 0, 2, 5'."""
    if len(indices) == 1:
        return f"dump {indices[0]}"
    if indices == list(range(indices[0], indices[-1] + 1)):
        return f"dumps {indices[0]} to {indices[-1]}"
    return "dumps " + ", ".join(map(str, indices))
