"""A trace's dumps (trace/heap_dumps.py), symbolized (symbolizer.py), as the Profiles the reports
read (model.py): each distinct frame's Locations, call stack and sample made once and shared by
every dump that has them."""
import itertools
import operator
from typing import Dict, List, Optional, Sequence, Tuple

from droidheap.bulk import carried_over, made_once, misses
from droidheap.results.model import Location, Profile, StackSample, Unreachable
from droidheap.results.sites import CallStack, StackBudget
from droidheap.symbolizer import SymbolTable
from droidheap.trace.heap_dumps import Frame, HeapDump, Sample, TraceDumps


def samples_lost(dump: HeapDump) -> Tuple[str, ...]:
    return tuple(why for flag, why in (
        (dump.buffer_overran, "the buffer overran"),
        (dump.buffer_corrupted, "the buffer was corrupted"),
        (dump.hit_guardrail, "droidheapd's memory cap (--max-daemon-memory) ended the profile"),
        (dump.rejected_concurrent, "another profiler held the process")) if flag)

_FRAMES = operator.itemgetter(0)  # Sample.frames


class _Stacks:
    """A trace's call stacks as CallStacks of Locations. Its frames and stacks are interned
    objects (heap_dumps), so each frame's Locations and each stack are made once, found again
    by identity, and shared by every sample of every dump that has them."""

    def __init__(self, symbols: SymbolTable, source: str):
        self._symbols = symbols
        self._budget = StackBudget(source)
        # By id(frame): its Locations. The frames are kept alive, so that their ids stay theirs.
        self._frames: Dict[int, Tuple[Location, ...]] = {}
        self._kept: List[Frame] = []
        self._stacks: Dict[int, Tuple[Sequence[Frame], CallStack]] = {}

    def stacks(self, samples: List[Sample]) -> List[CallStack]:
        """The samples' stacks: `frames` (root first) leaf first, each frame's inline functions
        innermost first."""
        return made_once(list(map(_FRAMES, samples)), self._stacks, self._stack)

    def _stack(self, frames: Sequence[Frame]) -> CallStack:
        leaf_first = frames[::-1]
        locations = list(map(self._frames.get, map(id, leaf_first)))
        for i in misses(locations):
            frame = leaf_first[i]
            self._kept.append(frame)
            locations[i] = self._frames[id(frame)] = tuple(
                Location(line.function, line.file, line.line, frame.mapping.path)
                for line in self._symbols.lines(frame))
        self._budget.spend(len(locations), sum(map(len, locations)))
        return CallStack(itertools.chain.from_iterable(locations))


class _Samples:
    """A trace's Samples as StackSamples, each made once: by the Sample's identity, since a stack
    nothing happened at between dumps is one Sample (heap_dumps), and so one StackSample."""

    def __init__(self, stacks: _Stacks):
        self._stacks = stacks
        self._made: Dict[int, StackSample] = {}
        self._kept: List[Sample] = []  # the Samples `_made` knows, alive: their ids stay theirs
        # By stream (a process's heap, or what its sweeps found unreachable): the last dump's
        # Samples and StackSamples.
        self._last: Dict[tuple, Tuple[List[Sample], List[StackSample]]] = {}

    def of(self, stream: tuple, dump_samples: List[Sample]) -> List[StackSample]:
        """A dump's StackSamples: those of the dump before of `stream` where it held the same
        Sample at the same place (as a rule), the others looked up or made."""
        before, made = self._last.get(stream, ([], []))
        samples, _ = carried_over(dump_samples, before, made, self._looked_up)
        self._last[stream] = (dump_samples, samples)
        return samples

    def _looked_up(self, dump_samples: List[Sample]) -> List[StackSample]:
        # Looked up by C loops (map), made in Python only for the samples new in this dump.
        samples = list(map(self._made.get, map(id, dump_samples)))
        at = list(misses(samples))
        new = list(map(dump_samples.__getitem__, at))
        self._kept += new
        for i, sample, stack in zip(at, new, self._stacks.stacks(new)):
            _, allocated, freed, alloc_count, free_count = sample
            samples[i] = self._made[id(sample)] = StackSample(
                stack, alloc_count, allocated, alloc_count - free_count, allocated - freed)
        return samples


def _unreachable(dump: HeapDump, samples: _Samples) -> Optional[Unreachable]:
    sweep = dump.unreachable
    if sweep is None:
        return None
    return Unreachable(
        samples=samples.of((dump.pid, dump.heap_name, "unreachable"), dump.unreachable_samples),
        swept=sweep.swept,
        # As droidheapd judges it: every block is known when every one was sampled from the start.
        complete=sweep.swept and dump.sampling_interval_bytes == 1 and dump.from_startup,
        blocks_swept=sweep.blocks_swept if sweep.swept else None,
        blocks=sweep.blocks if sweep.swept else None,
        bytes=sweep.bytes if sweep.swept else None,
        held_ns=sweep.held_ns if sweep.swept else None,
        listed_blocks=sweep.listed_blocks if sweep.swept else None, note=sweep.note)


def profiles_from_dumps(dumps: TraceDumps, symbols: SymbolTable, source: str = "",
                        consume: bool = False) -> List[Profile]:
    """The dumps as Profiles; `consume` empties each dump's samples once its profile holds them
    (a conversion's peak memory would hold both)."""
    made = _Samples(_Stacks(symbols, source))
    profiles = []
    for pid in sorted(dumps.dumps):
        for dump in dumps.dumps[pid]:
            samples = made.of((pid, dump.heap_name), dump.samples)
            unreachable = _unreachable(dump, made)
            if consume:
                dump.samples = []
            profiles.append(Profile(
                pid=pid, cmdline=dumps.cmdlines.get(pid, ""), heap=dump.heap_name,
                dump_index=dump.index, timestamp_ns=dump.timestamp,
                sampling_interval_bytes=dump.sampling_interval_bytes, samples=samples,
                at_peak=dump.at_peak, totals=dump.totals,
                unwinding_errors=dump.stats.unwinding_errors,
                samples_lost=samples_lost(dump), disconnected=dump.disconnected,
                ending=dump.ending, unreachable=unreachable,
                source=source))
    return profiles
