"""`droidheap-results.json.gz` in an output directory: its profiles as the reports read them (every
dump's symbolized call stacks and figures, and what the trace's reading warned of), written by the
conversion, so that `report`, `diff` and `check` answer without parsing the trace again.

Each Location, each call stack (as indexes of its Locations, leaf first) and each distinct sample
(one flat list of [stack, alloc_count, alloc_bytes, in_use_count, in_use_bytes] runs) is listed
once: a stack nothing happened at between dumps is one sample for all of them (figures are
cumulative). A dump is the indexes of its samples, or, where most are those of the dump before of
its process's heap at the same places (as a rule: the daemon keeps its stacks in order), that
dump's index ("base"), its length, and the places that differ ("at") with their samples. What a
dump's sweep for unreachable memory found is its figures and its samples, told the same way
against the sweep of the dump before (leaked blocks stay leaked). So the file grows with the
trace, never with dumps x depth nor dumps x stacks. It is read as
input like any other: decompression is capped, every field's type checked, every index bounded,
the samples its dumps hold bounded by its size; damage is one DroidheapError.
"""
import itertools
import json
import operator
import pathlib
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from droidheap.bounded_inflate import inflate
from droidheap.bulk import by_identity, changed_places, misses
from droidheap.errors import DroidheapError
from droidheap.output_files import write_gzip_output
from droidheap.results.model import Location, Profile, Results, StackSample, Unreachable
from droidheap.results.sites import CallStack
from droidheap.trace.process_figures import HeapTotals

RESULTS_FILE = "droidheap-results.json.gz"
_FORMAT = "droidheap-results"
_VERSION = 3
# Its JSON compresses 5 to 12 times; parsed, each byte costs several more (as a pprof's).
_INFLATE_RATIO = 32
_SAMPLE_FIELDS = 5  # stack, then StackSample's four figures
# A dump that changed little since the one before is stored as its changes: its ~250 bytes may
# name every sample of that dump again, a reference (8 bytes) each once read. So the dumps'
# samples, all told, are bounded by the file's inflated size: droidheap's own hold under one per
# byte while the processes allocate, about five when an idle process of 20,000 call stacks is
# dumped a thousand times unchanged, and 13 for one of 10,000 dumped every second for an hour. At
# most 256 bytes of references per byte read.
_PLACES_PER_BYTE = 32


def write_results(results: Results, path: pathlib.Path,
                  write_gzip: Callable[[pathlib.Path, bytes], None] = write_gzip_output) -> None:
    distinct = _DistinctSamples()
    # (pid, heap) -> the number of the profile before and its samples; of the one before that
    # has an Unreachable, and that one's samples.
    last: Dict[Tuple[int, str], Tuple[int, List[StackSample]]] = {}
    last_unreachable: Dict[Tuple[int, str], Tuple[int, List[StackSample]]] = {}
    profiles = []
    for number, p in enumerate(results.profiles):
        totals = p.totals
        profile = {
            "pid": p.pid, "cmdline": p.cmdline, "heap": p.heap, "dump": p.dump_index,
            "timestamp_ns": p.timestamp_ns, "sampling_interval_bytes": p.sampling_interval_bytes,
            "at_peak": p.at_peak, "unwinding_errors": p.unwinding_errors,
            "totals": None if totals is None else [totals.alloc_count, totals.alloc_bytes,
                                                   totals.free_count, totals.free_bytes],
            "samples_lost": list(p.samples_lost), "disconnected": p.disconnected,
            "ending": p.ending, "unreachable": None,
            **_stored_samples(p.samples, last.get((p.pid, p.heap)), distinct)}
        last[(p.pid, p.heap)] = (number, p.samples)
        u = p.unreachable
        if u is not None:
            profile["unreachable"] = {
                "complete": u.complete, "swept": u.swept, "blocks_swept": u.blocks_swept,
                "blocks": u.blocks, "bytes": u.bytes, "held_ns": u.held_ns,
                "listed_blocks": u.listed_blocks, "note": u.note,
                **_stored_samples(u.samples, last_unreachable.get((p.pid, p.heap)), distinct)}
            last_unreachable[(p.pid, p.heap)] = (number, u.samples)
        profiles.append(profile)
    samples = distinct.samples
    stacks = by_identity(map(operator.itemgetter(0), samples))  # StackSample.stack
    stack_index = {key: i for i, key in enumerate(stacks)}
    locations = by_identity(itertools.chain.from_iterable(stacks.values()))
    location_index = {key: i for i, key in enumerate(locations)}
    columns = list(zip(*samples)) or [()] * _SAMPLE_FIELDS
    columns[0] = map(stack_index.__getitem__, map(id, columns[0]))
    data = {"format": _FORMAT, "version": _VERSION, "warnings": results.warnings,
            "locations": [[l.function, l.file, l.line, l.module] for l in locations.values()],
            "stacks": [list(map(location_index.__getitem__, map(id, stack)))
                       for stack in stacks.values()],
            "samples": list(itertools.chain.from_iterable(zip(*columns))),
            "profiles": profiles}
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    write_gzip(path, text)


def _stored_samples(samples: List[StackSample], before: Optional[Tuple[int, List[StackSample]]],
                  distinct: "_DistinctSamples") -> Dict[str, Any]:
    """A dump's samples as stored: their indexes, or, given (the profile before, its samples),
    that profile's number ("base"), their length and the places that differ with their samples
    when those are at most half."""
    base, earlier = before or (None, [])
    at = changed_places(samples, earlier)
    if base is not None and len(at) <= len(samples) // 2:
        return {"base": base, "length": len(samples), "at": at,
                "samples": distinct.indexes(map(samples.__getitem__, at))}
    return {"base": None, "samples": distinct.indexes(samples)}


class _DistinctSamples:
    """Numbers each distinct StackSample (by identity) in the order first met."""

    def __init__(self):
        self.samples: List[StackSample] = []  # alive while numbered: their ids stay theirs
        self._index: Dict[int, int] = {}

    def indexes(self, samples: Iterable[StackSample]) -> List[int]:
        samples = list(samples)
        found = list(map(self._index.get, map(id, samples)))
        for i in misses(found):
            found[i] = self._index.setdefault(id(samples[i]), len(self.samples))
            if found[i] == len(self.samples):
                self.samples.append(samples[i])
        return found


def _typed(value: Any, kind: type, what: str) -> Any:
    # bool is an int to Python; a figure must not be true or false.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{what} is not a {kind.__name__}")
    return value


def _list(value: Any, kind: type, what: str) -> list:
    items = _typed(value, list, what)
    if not set(map(type, items)) <= {kind}:  # bool is not int here, as in _typed
        raise ValueError(f"{what} is not a {kind.__name__}")
    return items


def _samples(flat: List[int], stacks: List[CallStack]) -> List[StackSample]:
    """The distinct samples: runs of [stack, alloc_count, alloc_bytes, in_use_count,
    in_use_bytes], decoded column by column (a large trace has hundreds of thousands)."""
    if len(flat) % _SAMPLE_FIELDS:
        raise ValueError("the samples are cut short")
    indexes = flat[::_SAMPLE_FIELDS]
    if indexes and not 0 <= min(indexes) <= max(indexes) < len(stacks):
        raise ValueError("a sample names a stack that is not in the file")
    return list(itertools.starmap(StackSample, zip(
        map(stacks.__getitem__, indexes), *(flat[i::_SAMPLE_FIELDS] for i in range(1, 5)))))


def _fits(length: int, room: int) -> None:
    if length > room:
        raise ValueError("its dumps hold more samples than its size could honestly hold")


def _read_stored_samples(raw: Dict[str, Any], samples: List[StackSample],
                         earlier: List[Profile],
                         of: Callable[[Profile], Optional[List[StackSample]]],
                         room: int) -> List[StackSample]:
    """A dump's samples as _stored_samples stored them; `of`: those of an earlier profile its base
    may name (None: it may not). `room`: how many it may hold (the file's size bounds them, see
    _PLACES_PER_BYTE), refused before they are allocated."""
    indexes = _list(raw["samples"], int, "a sample index")
    if indexes and not 0 <= min(indexes) <= max(indexes) < len(samples):
        raise ValueError("a profile names a sample that is not in the file")
    changed = list(map(samples.__getitem__, indexes))
    base = raw["base"]
    if base is None:
        _fits(len(changed), room)
        return changed  # made already: one per index the file holds
    if not 0 <= _typed(base, int, "a base") < len(earlier) or of(earlier[base]) is None:
        raise ValueError("a profile's base is not a profile before it")
    before = of(earlier[base])
    length, at = _typed(raw["length"], int, "a length"), _list(raw["at"], int, "a place")
    # Places past its base's end are filled by its changes, each once: a length beyond them
    # would be places nothing fills, allocated before they were found empty.
    if not 0 <= length <= len(before) + len(at) or len(at) != len(
            changed) or at and not 0 <= min(at) <= max(at) < length:
        raise ValueError("a profile's changes are not places in it")
    _fits(length, room)
    dump_samples = before[:length]
    dump_samples += [None] * (length - len(dump_samples))
    for i, sample in zip(at, changed):
        dump_samples[i] = sample
    if None in dump_samples:
        raise ValueError("a profile has places nothing fills")
    return dump_samples


def _profile_samples(profile: Profile) -> List[StackSample]:
    return profile.samples


def _unreachable_samples(profile: Profile) -> Optional[List[StackSample]]:
    return None if profile.unreachable is None else profile.unreachable.samples


def _samples_stored(profile: Profile) -> int:
    return len(profile.samples) + len(_unreachable_samples(profile) or ())


def _optional_int(value: Any, what: str) -> Optional[int]:
    return None if value is None else _typed(value, int, what)


def _unreachable(raw: Any, samples: List[StackSample], earlier: List[Profile],
                 room: int) -> Optional[Unreachable]:
    if raw is None:
        return None
    _typed(raw, dict, "unreachable")
    return Unreachable(
        samples=_read_stored_samples(raw, samples, earlier, _unreachable_samples, room),
        complete=_typed(raw["complete"], bool, "complete"),
        swept=_typed(raw["swept"], bool, "swept"),
        blocks_swept=_optional_int(raw["blocks_swept"], "blocks_swept"),
        blocks=_optional_int(raw["blocks"], "blocks"), bytes=_optional_int(raw["bytes"], "bytes"),
        held_ns=_optional_int(raw["held_ns"], "held_ns"),
        listed_blocks=_optional_int(raw["listed_blocks"], "listed_blocks"),
        note=_typed(raw["note"], str, "note"))


def _profile(raw: Dict[str, Any], samples: List[StackSample], earlier: List[Profile],
             source: str, room: int) -> Profile:
    """`room`: how many samples it may hold, its sweep's with its own."""
    _typed(raw, dict, "a profile")
    dump_samples = _read_stored_samples(raw, samples, earlier, _profile_samples, room)
    totals = raw["totals"]
    if totals is not None:
        values = _list(totals, int, "a total")
        if len(values) != 4:
            raise ValueError("a profile's totals are not four figures")
        totals = HeapTotals(*values)
    return Profile(
        pid=_typed(raw["pid"], int, "pid"), cmdline=_typed(raw["cmdline"], str, "cmdline"),
        heap=_typed(raw["heap"], str, "heap"), dump_index=_typed(raw["dump"], int, "dump"),
        timestamp_ns=_typed(raw["timestamp_ns"], int, "timestamp_ns"),
        sampling_interval_bytes=_typed(raw["sampling_interval_bytes"], int, "the interval"),
        samples=dump_samples,
        at_peak=_typed(raw["at_peak"], bool, "at_peak"), totals=totals,
        unwinding_errors=_typed(raw["unwinding_errors"], int, "unwinding_errors"),
        samples_lost=tuple(_list(raw["samples_lost"], str, "samples_lost")),
        disconnected=_typed(raw["disconnected"], bool, "disconnected"),
        ending=_typed(raw["ending"], str, "ending"),
        unreachable=_unreachable(raw["unreachable"], samples, earlier, room - len(dump_samples)),
        source=source)


def read_results(path: pathlib.Path) -> Optional[Results]:
    """The results in `path`; None when the file is of another version (the caller reads the
    trace instead). Raises DroidheapError when it cannot be read or is damaged."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DroidheapError(f"cannot read {path}: {e.strerror or e}") from e
    try:
        text = inflate(data, str(path), ratio=_INFLATE_RATIO)
        # Each list or object costs ~60 bytes once parsed: a file of nothing else ("[],[],...")
        # would cost 20 times its text. droidheap's own hold one per 100 bytes or more.
        if text.count(b"[") + text.count(b"{") > len(text) // 16 + 1024:
            raise ValueError("it holds more lists than its size could honestly hold")
        raw = json.loads(text)
        if _typed(raw, dict, "the file").get("format") != _FORMAT:
            raise ValueError("it is not droidheap's results")
        if raw.get("version") != _VERSION:
            return None
        locations = []
        for row in _list(raw["locations"], list, "a location"):
            function, file, line, module = row
            locations.append(Location(_typed(function, str, "a function"),
                                      _typed(file, str, "a file"), _typed(line, int, "a line"),
                                      _typed(module, str, "a module")))
        stacks = []
        for row in _list(raw["stacks"], list, "a stack"):
            if row and not 0 <= min(_list(row, int, "a location index")) <= max(row) < len(
                    locations):
                raise ValueError("a stack names a location that is not in the file")
            stacks.append(CallStack(map(locations.__getitem__, row)))
        samples = _samples(_list(raw["samples"], int, "a sample's figure"), stacks)
        profiles: List[Profile] = []
        room = _PLACES_PER_BYTE * len(text)
        for p in _list(raw["profiles"], dict, "a profile"):
            profiles.append(_profile(p, samples, profiles, str(path), room))
            room -= _samples_stored(profiles[-1])
        return Results(profiles, _list(raw["warnings"], str, "a warning"))
    except (ValueError, KeyError, TypeError, RecursionError) as e:  # json's errors are ValueErrors
        raise DroidheapError(f"{path} is damaged: {e}") from e
