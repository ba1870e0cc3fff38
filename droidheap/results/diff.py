"""Growth per call site between two sets of dumps: what a change, or a stretch of a run, added."""
import dataclasses
import pathlib
import re
from typing import List, Optional, Sequence, Set, Tuple

from droidheap.results.model import Location, Profile
from droidheap.results.series import spans
from droidheap.results.sites import SiteFigures, site_figures


@dataclasses.dataclass
class SiteGrowth:
    site: Location
    base: SiteFigures
    current: SiteFigures

    @property
    def in_use_delta(self) -> int:
        return self.current.in_use_bytes - self.base.in_use_bytes

    @property
    def in_use_count_delta(self) -> int:
        return self.current.in_use_count - self.base.in_use_count

    @property
    def alloc_delta(self) -> int:
        return self.current.alloc_bytes - self.base.alloc_bytes


def site_growth(base: Sequence[Profile], current: Sequence[Profile]) -> List[SiteGrowth]:
    """Every site of either side, the most grown first and the most shrunk last; a site only one
    side has counts as zero on the other."""
    before = site_figures(s for p in base for s in p.samples)
    after = site_figures(s for p in current for s in p.samples)
    growth = []
    for key in before.keys() | after.keys():
        site = (after.get(key) or before[key]).site
        growth.append(SiteGrowth(site, before.get(key, SiteFigures(site)),
                                 after.get(key, SiteFigures(site))))
    growth.sort(key=lambda g: (-g.in_use_delta, -g.alloc_delta, g.site.function))
    return [g for g in growth if g.in_use_delta or g.alloc_delta or g.in_use_count_delta]


@dataclasses.dataclass
class SeriesGrowth:
    """One process's heap over the dumps its growth is measured between (results/series.py)."""
    base: Optional[Profile]  # None: from when profiling began
    current: Profile
    growth: List[SiteGrowth]


def series_growth(profiles: Sequence[Profile], base_index: Optional[int] = None,
                  current_index: Optional[int] = None,
                  path: str = "the profile") -> Tuple[List[SeriesGrowth], List[str]]:
    """Per process and heap, the growth while it ran (series.growth_span: first running dump to
    last, not to the dump after its exit; or from the start to its peak), or between the dumps
    numbered base_index and current_index where given; and the series that lack one of those
    (series.spans)."""
    chosen, left_out = spans(profiles, base_index, current_index, path)
    return [SeriesGrowth(base, current, site_growth([base] if base else [], [current]))
            for base, current in chosen], left_out


def program_names(profiles: Sequence[Profile]) -> Set[str]:
    """The programs the profiles are of, by their executable's name (`app` of `/data/local/tmp/app
    --fast`; an app's process `com.example.app:remote` is `com.example.app`); those whose name is
    not known (a pprof from elsewhere, named after its file; a pid unnamed) are left out."""
    return {pathlib.PurePosixPath(p.cmdline.split(" ")[0]).name.split(":")[0] for p in profiles
            if p.pid and p.cmdline and not re.fullmatch(r"pid \d+", p.cmdline)}
