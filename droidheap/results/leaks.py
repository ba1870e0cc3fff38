"""Leak suspects: over the continuous dumps of one process's heap (`-c`) taken while it ran (not
the dump after its exit, where a program that frees at exit would hide every leak; nor dumps at
the peak, each a moment of its own: results/series.py), the call sites whose bytes in use grew
steadily.

A leak grows a little at every dump; a cache filled once, or a buffer taken at start, jumps once
and stays. So a site is ranked by its growth weighted by how steadily it came: the share of
dump-to-dump steps in which it grew, and how evenly the growth spread over those steps.
"""
import itertools
from typing import List, Sequence

from droidheap.results.model import LeakSuspect, Profile
from droidheap.results.series import by_heap, running
from droidheap.results.sites import profile_sites

# Fewer dumps than this tell a jump from a trend no better than a coin.
MIN_DUMPS = 3
# Sites that grew in fewer steps than this share are not suspects however much they grew.
MIN_STEADINESS = 0.5


def _suspects_of(dumps: List[Profile]) -> List[LeakSuspect]:
    by_dump = [profile_sites(d, before) for d, before in zip(dumps, [None, *dumps])]
    suspects = []
    for key in set(itertools.chain.from_iterable(by_dump)):
        in_use = [sites[key].in_use_bytes if key in sites else 0 for sites in by_dump]
        growth = in_use[-1] - in_use[0]
        if growth <= 0:
            continue
        steps = [b - a for a, b in zip(in_use, in_use[1:])]
        rises = [s for s in steps if s > 0]
        steadiness = len(rises) / len(steps)
        if steadiness < MIN_STEADINESS:
            continue
        # 1 when every step rose by as much; towards 1/steps when one step carried it all.
        evenness = 1 - max(rises) / sum(rises) + 1 / len(steps)
        site = next(sites[key].site for sites in by_dump if key in sites)
        suspects.append(LeakSuspect(dumps[0].pid, dumps[0].heap, site, in_use, growth,
                                    steadiness, growth * steadiness * evenness))
    return suspects


def leak_suspects(profiles: Sequence[Profile], limit: int = 10) -> List[LeakSuspect]:
    """The `limit` strongest suspects over all processes and heaps, strongest first."""
    series = [running(dumps) for dumps in by_heap(profiles).values()]
    suspects = [s for dumps in series if len(dumps) >= MIN_DUMPS for s in _suspects_of(dumps)]
    suspects.sort(key=lambda s: (-s.score, s.site.function))
    return suspects[:limit]
