"""Call sites: where a person would say an allocation came from, and the figures booked to each.

The leaf frame of a stack is whatever called malloc, which in C++ is nearly always
`operator new` and in C often `strdup` or stdio: true, and useless in a table of sites. A stack's
call site is its first frame (from the leaf) outside the C and C++ runtime: the standard libraries
themselves, and the `std::` templates (vector growth, allocators) inlined into the program. A stack
that is runtime all the way down keeps its leaf.
"""
import dataclasses
import functools
import pathlib
import re
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from droidheap.bulk import changed_places
from droidheap.errors import DroidheapError
from droidheap.results.model import Location, Profile, StackSample

# The runtime's shared objects, by file name (glibc's and bionic's, libstdc++ and libc++, the
# unwinder and the dynamic linker, droidheap's own client).
_RUNTIME_MODULE = re.compile(
    r"^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libc\+\+(_shared)?|libc\+\+abi|libgcc_s"
    r"|libunwind|ld-linux[^/]*|ld-android|linker(64)?|libdroidheap[^/]*)(\.so[.0-9]*)?$")
# Runtime functions compiled into the program: the standard library's templates, and the
# allocation operators where they are linked in statically.
_RUNTIME_FUNCTION = re.compile(r"^(std::|__gnu_cxx::|__cxxabiv1::|operator new|operator delete)")

METRICS = ("in_use_bytes", "in_use_count", "alloc_bytes", "alloc_count")


def _qualified_name(function: str) -> str:
    """`std::vector<int>::push_back` of `void std::vector<int>::push_back(int const&)`: a
    demangled template function's name comes after its return type."""
    depth, start = 0, 0
    for i, char in enumerate(function):
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        elif char == "(" and depth == 0 and i > 0:
            return function[start:i]
        elif char == " " and depth == 0 and not function.startswith("operator", start):
            start = i + 1
    return function[start:]


@functools.lru_cache(maxsize=4096)  # a trace maps tens of files; each is asked of every stack
def module_name(module: str) -> str:
    return pathlib.PurePosixPath(module).name


def is_runtime(location: Location) -> bool:
    return bool(_RUNTIME_MODULE.match(module_name(location.module))
                or _RUNTIME_FUNCTION.match(_qualified_name(location.function)))


def _site_index(stack: Sequence[Location]) -> int:
    return next((i for i, frame in enumerate(stack) if not is_runtime(frame)), 0)


def call_site(stack: Sequence[Location]) -> Location:
    """The frame a stack's bytes are booked to (see the module docstring)."""
    return stack[_site_index(stack)] if stack else Location("?")


class CallStack(tuple):
    """A call stack as the reports read it: its Locations, leaf first. Whoever reads a profile
    makes one per distinct stack and shares it between samples and dumps, so that its call site
    is found once, not once per sample of every dump."""

    @functools.cached_property
    def site_index(self) -> int:
        """Where its call site is: its callers follow."""
        return _site_index(self)

    @functools.cached_property
    def site(self) -> Location:
        return self[self.site_index] if self else Location("?")

    @functools.cached_property
    def site_key(self) -> Tuple[str, str, int, str]:
        return _site_key(self.site)


# An honest frame expands to itself and the calls inlined at it: a few, dozens at most.
_LOCATIONS_PER_FRAME = 64
_LOCATIONS_FLOOR = 1 << 22  # below it nothing is refused: a small input may inline deeply


class StackBudget:
    """The Locations a reader of one input (trace or pprof file) may make for its distinct call
    stacks: _LOCATIONS_PER_FRAME for each frame they name, at least _LOCATIONS_FLOOR. A frame of
    a thousand inlined lines named a thousand times in each of a thousand stacks is a few KiB
    that would expand to a billion; past the budget the input is refused instead."""

    def __init__(self, source: str):
        self.source = source
        self.frames = 0
        self.locations = 0

    def spend(self, frames: int, locations: int) -> None:
        """Books one stack of `frames` frames, `locations` Locations once expanded: asked before
        it is made."""
        self.frames += frames
        self.locations += locations
        if self.locations > max(_LOCATIONS_FLOOR, _LOCATIONS_PER_FRAME * self.frames):
            raise DroidheapError(
                f"{self.source or 'the input'}: its call stacks expand to more than "
                f"{_LOCATIONS_PER_FRAME} functions a frame: more than it could honestly hold")


@dataclasses.dataclass
class SiteFigures:
    site: Location
    alloc_count: int = 0
    alloc_bytes: int = 0
    in_use_count: int = 0
    in_use_bytes: int = 0

    def add(self, sample: Union[StackSample, "SiteFigures"]) -> None:
        self.alloc_count += sample.alloc_count
        self.alloc_bytes += sample.alloc_bytes
        self.in_use_count += sample.in_use_count
        self.in_use_bytes += sample.in_use_bytes

    def value(self, metric: str) -> int:
        return getattr(self, metric)


def _site_key(site: Location) -> Tuple[str, str, int, str]:
    # One function at one line is one site whichever path its module was mapped from.
    return (site.function, site.file, site.line, module_name(site.module))


def site_figures(samples: Iterable[StackSample]) -> Dict[Tuple, SiteFigures]:
    sites: Dict[Tuple, SiteFigures] = {}
    for sample in samples:
        figures = sites.get(sample.stack.site_key)
        if figures is None:
            figures = sites[sample.stack.site_key] = SiteFigures(sample.stack.site)
        figures.add(sample)
    return sites


def profile_sites(profile: Profile, before: Optional[Profile] = None) -> Dict[Tuple, SiteFigures]:
    """site_figures of the profile's samples, made once per profile: the leak suspects, the page
    and the report each ask (read only). Given the dump `before` it of the same process's heap,
    made from that one's where few samples changed."""
    if profile.sites is None:
        if before is not None and before.sites is not None:
            profile.sites = _sites_since(before.sites, before.samples, profile.samples)
        if profile.sites is None:
            profile.sites = site_figures(profile.samples)
    return profile.sites


def _sites_since(sites: Dict[Tuple, SiteFigures], before: List[StackSample],
                 now: List[StackSample]) -> Optional[Dict[Tuple, SiteFigures]]:
    """site_figures(now) from site_figures(before): the changed samples' figures taken out and
    the new ones' put in. None unless every changed place holds a sample of the same site as
    before (then no site loses its last sample, and the sites come in the same order)."""
    at = changed_places(now, before)
    if len(at) > len(now) // 2 or len(now) < len(before):
        return None
    replaced = at[:len(at) - (len(now) - len(before))]  # the rest are past before's end
    old, new = list(map(before.__getitem__, replaced)), list(map(now.__getitem__, replaced))
    if any(a.stack.site != b.stack.site for a, b in zip(old, new) if a.stack is not b.stack):
        return None
    sites = {key: dataclasses.replace(figures) for key, figures in sites.items()}
    # Unpacked by name, not starred: a starred target makes a list, per sample of every dump.
    for (_, was_count, was_bytes, was_in_use_count, was_in_use), (
            stack, count, size, in_use_count, in_use) in zip(old, new):
        site = sites[stack.site_key]
        site.alloc_count += count - was_count
        site.alloc_bytes += size - was_bytes
        site.in_use_count += in_use_count - was_in_use_count
        site.in_use_bytes += in_use - was_in_use
    for sample in map(now.__getitem__, at[len(replaced):]):
        figures = sites.get(sample.stack.site_key)
        if figures is None:
            figures = sites[sample.stack.site_key] = SiteFigures(sample.stack.site)
        figures.add(sample)
    return sites


def top_sites(samples: Iterable[StackSample], metric: str = "in_use_bytes",
              limit: int = 10) -> List[SiteFigures]:
    """The sites with the most of `metric`, largest first (those with none of it left out)."""
    ranked = sorted((s for s in site_figures(samples).values() if s.value(metric) > 0),
                    key=lambda s: (-s.value(metric), -s.in_use_bytes, -s.alloc_bytes,
                                   s.site.function))
    return ranked[:limit]


@dataclasses.dataclass
class TreeNode:
    """A bottom-up tree: a call site, then who called it, and so on; each node's figures are the
    samples whose stacks pass through that path."""
    figures: SiteFigures
    children: List["TreeNode"] = dataclasses.field(default_factory=list)

    @property
    def location(self) -> Location:
        return self.figures.site


def bottom_up(samples: Sequence[StackSample], metric: str = "in_use_bytes", sites: int = 10,
              depth: int = 6, branches: int = 3) -> List[TreeNode]:
    """The `sites` largest call sites by `metric`, each with its callers `depth` levels up, the
    `branches` largest at each level."""
    # A path is (stack, where its next caller is, the figures of its samples): one per distinct
    # stack, never a copy of its frames. A stack of thousands of frames named by thousands of
    # samples costs its length once, not once per sample per level.
    Path = Tuple[CallStack, int, SiteFigures]

    def grow(paths: List[Path], location: Location, level: int) -> TreeNode:
        node = TreeNode(SiteFigures(location))
        for _, _, figures in paths:
            node.figures.add(figures)
        if level < depth:
            callers: Dict[Location, List[Path]] = {}
            for stack, at, figures in paths:
                if at < len(stack):
                    callers.setdefault(stack[at], []).append((stack, at + 1, figures))
            children = [grow(group, caller, level + 1) for caller, group in callers.items()]
            children.sort(key=lambda n: -n.figures.value(metric))
            node.children = [c for c in children if c.figures.value(metric) > 0][:branches]
        return node

    # The largest sites first, then the callers of those only.
    ranked = sorted(((key, figures) for key, figures in site_figures(samples).items()
                     if figures.value(metric) > 0),
                    key=lambda item: (-item[1].value(metric), item[1].site.function))
    chosen: Dict[Tuple, Dict[int, Path]] = {key: {} for key, _ in ranked[:sites]}
    for sample in samples:
        stacks = chosen.get(sample.stack.site_key)
        if stacks is not None:
            stack = sample.stack
            path = stacks.get(id(stack))
            if path is None:
                path = stacks[id(stack)] = (stack, stack.site_index + 1, SiteFigures(stack.site))
            path[2].add(sample)
    return [grow(list(chosen[key].values()), figures.site, 1) for key, figures in ranked[:sites]]
