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

from droidheap.results.model import Profile


def by_heap(profiles: Sequence[Profile]) -> Dict[Tuple[int, str], List[Profile]]:
    """Every dump of each (pid, heap), in dump order."""
    series: Dict[Tuple[int, str], List[Profile]] = {}
    for profile in sorted(profiles, key=lambda p: (p.pid, p.heap, p.dump_index)):
        series.setdefault((profile.pid, profile.heap), []).append(profile)
    return series


def running(dumps: Sequence[Profile]) -> List[Profile]:
    """Of one heap's dumps, those taken while the process ran: a series (not at the peak, each
    a moment of its own) that ends before the exit dump."""
    return [d for d in dumps if not d.at_peak and not d.at_exit]


def growth_span(dumps: Sequence[Profile]) -> Tuple[Optional[Profile], Profile]:
    """The dumps growth of one process's heap is measured between (`dumps`: all of them, in dump
    order), as the module says: (base, current), base None for the start of profiling."""
    peaks = [d for d in dumps if d.at_peak]
    if peaks:
        return None, peaks[-1]
    ran = running(dumps)
    if len(ran) > 1:
        return ran[0], ran[-1]
    return None, (ran or dumps)[-1]
