"""Reads what the reports work on (model.py) from any of: an output directory (what its
conversion stored, store.py; else its symbolized-trace, else its raw-trace, else its pprof
files), a Perfetto trace (ours or heapprofd's; symbolized by the module_symbols packets it
carries, else here) or a pprof file.
"""
import gzip
import itertools
import operator
import pathlib
import re
import zlib
from typing import Dict, List, Optional, Sequence, Tuple

from google.protobuf.message import DecodeError

from droidheap.errors import DroidheapError
from droidheap.results.model import Location, Profile, Results, StackSample
from droidheap.results.sites import CallStack
from droidheap.results.store import RESULTS_FILE, read_results
from droidheap.symbol_cache import SymbolCache
from droidheap.symbolizer import SymbolTable, Symbolizer, symbolize_dumps
from droidheap.trace.counter_tracks import CONNECTION_LOST, EXITED, GUARDRAIL
from droidheap.trace.heap_dumps import Frame, HeapDump, Sample, TraceDumps, rebuild_dumps
from droidheap.trace.reader import parse_trace
from droidheap.trace.symbolized import read_module_symbols

SYMBOLIZED_TRACE = "symbolized-trace"
RAW_TRACE = "raw-trace"
_GZIP_MAGIC = b"\x1f\x8b"


def samples_lost(dump: HeapDump) -> Tuple[str, ...]:
    return tuple(why for flag, why in (
        (dump.buffer_overran, "the buffer overran"),
        (dump.buffer_corrupted, "the buffer was corrupted"),
        (dump.hit_guardrail, "droidheapd's memory cap (--max-daemon-memory) ended the profile"),
        (dump.rejected_concurrent, "another profiler held the process")) if flag)


def ending_note(disconnected: bool, ending: str, exit_status: Optional[int] = None) -> str:
    """What became of a process gone by its last dump (`ending`: HeapDump.ending), for a note; ""
    for one still connected. `exit_status`: what the host saw of a program it started."""
    if not disconnected:
        return ""
    status = "" if exit_status is None else f"the process exited with status {exit_status}"
    if ending == EXITED:
        return status or "the process exited"
    if ending == GUARDRAIL:  # samples_lost says which, before this
        return "its profile ended early" + (f"; {status}" if status else "")
    if ending == CONNECTION_LOST:
        return ("its connection was lost before the process exited normally (" +
                (status or "a crash, a kill, _exit or a closed socket") + ")")
    # An older daemon's trace, or heapprofd's: either.
    return status or "the process exited or its connection was lost"


class _Stacks:
    """A trace's call stacks as CallStacks of Locations. Its frames and stacks are interned
    objects (heap_dumps), so each frame's Locations and each stack are made once, found again
    by identity, and shared by every sample of every dump that has them."""

    def __init__(self, symbols: SymbolTable):
        self._symbols = symbols
        self._frames: Dict[int, Tuple[Frame, Tuple[Location, ...]]] = {}
        self._stacks: Dict[int, Tuple[Sequence[Frame], CallStack]] = {}

    def _frame(self, frame: Frame) -> Tuple[Location, ...]:
        known = self._frames.get(id(frame))
        if known is None or known[0] is not frame:
            known = self._frames[id(frame)] = (frame, tuple(
                Location(line.function, line.file, line.line, frame.mapping.path)
                for line in self._symbols.lines(frame)))
        return known[1]

    def stack(self, frames: Sequence[Frame]) -> CallStack:
        """`frames` (root first) leaf first, each frame's inline functions innermost first."""
        known = self._stacks.get(id(frames))
        if known is None or known[0] is not frames:
            known = self._stacks[id(frames)] = (frames, CallStack(
                location for frame in reversed(frames) for location in self._frame(frame)))
        return known[1]


def profiles_from_dumps(dumps: TraceDumps, symbols: SymbolTable, source: str = "",
                        consume: bool = False) -> List[Profile]:
    """The dumps as Profiles; `consume` empties each dump's samples once its profile holds them
    (a conversion's peak memory would hold both)."""
    stacks = _Stacks(symbols)
    # By the Sample's identity: a stack nothing happened at between dumps is one Sample
    # (heap_dumps), and so one StackSample.
    made: Dict[int, StackSample] = {}
    kept: List[Sample] = []  # the Samples `made` knows, alive: their ids stay theirs
    profiles = []
    for pid in sorted(dumps.dumps):
        for dump in dumps.dumps[pid]:
            # Looked up by C loops (map), made in Python only for the samples new in this dump.
            samples = list(map(made.get, map(id, dump.samples)))
            for i in itertools.compress(range(len(samples)), map(operator.not_, samples)):
                sample = dump.samples[i]
                kept.append(sample)
                samples[i] = made[id(sample)] = StackSample(
                    stacks.stack(sample.frames), sample.alloc_count, sample.self_allocated,
                    sample.alloc_count - sample.free_count, sample.in_use)
            if consume:
                dump.samples = []
            profiles.append(Profile(
                pid=pid, cmdline=dumps.cmdlines.get(pid, ""), heap=dump.heap_name,
                dump_index=dump.index, timestamp_ns=dump.timestamp,
                sampling_interval_bytes=dump.sampling_interval_bytes, samples=samples,
                at_peak=dump.at_peak, totals=dump.totals,
                unwinding_errors=dump.stats.unwinding_errors,
                samples_lost=samples_lost(dump), disconnected=dump.disconnected,
                ending=dump.ending,
                source=source))
    return profiles


def _load_trace(path: pathlib.Path, data: bytes, search_dirs: Sequence[pathlib.Path]) -> Results:
    contents = parse_trace(data)
    if not contents.packets:
        raise DroidheapError(f"{path} is neither a Perfetto trace nor a pprof file")
    dumps = rebuild_dumps(contents.packets)
    warnings = contents.warnings + dumps.warnings
    modules = read_module_symbols(contents.packets)
    if modules:
        symbols = SymbolTable(modules)
    else:
        symbolizer = Symbolizer(search_dirs, cache=SymbolCache())
        symbols = symbolize_dumps(dumps, symbolizer)
        warnings += symbolizer.warnings
    return Results(profiles_from_dumps(dumps, symbols, str(path)), warnings)


def _pprof_identity(profile, path: pathlib.Path) -> Tuple[int, str, int, str]:
    """(pid, heap, dump index, cmdline) from our comments or file name; zeros and the file's name
    for a pprof from elsewhere."""
    comments = [profile.string_table[i] for i in profile.comment]
    for comment in comments:
        match = re.match(r"droidheap dump (\d+) of pid (\d+), heap (\S+),", comment)
        if match:
            return int(match[2]), match[3], int(match[1]), comments[0]
    match = re.match(r"heap_dump\.(\d+)\.(\d+)\.(.+)\.pb\.gz$", path.name)
    if match:
        return int(match[2]), match[3], int(match[1]), ""
    return 0, "pprof", 0, path.name


def _load_pprof(path: pathlib.Path, data: bytes) -> Profile:
    from droidheap.pprof import Profile as PprofProfile  # the message class
    try:
        profile = PprofProfile.FromString(gzip.decompress(data) if data[:2] == _GZIP_MAGIC
                                          else data)
    except (DecodeError, OSError, EOFError, zlib.error) as e:
        raise DroidheapError(f"{path} is not a readable pprof file: {e}") from e
    try:
        return _pprof_profile(path, profile)
    except (IndexError, KeyError, ValueError) as e:  # ids and indexes that point nowhere
        raise DroidheapError(f"{path} is a damaged pprof file: {type(e).__name__} {e}") from e


def _pprof_profile(path: pathlib.Path, profile) -> Profile:
    strings = profile.string_table
    types = [strings[t.type] for t in profile.sample_type]
    functions = {f.id: f for f in profile.function}
    mappings = {m.id: strings[m.filename] for m in profile.mapping}
    locations = {}
    for loc in profile.location:
        module = mappings.get(loc.mapping_id, "")
        lines = [Location(strings[functions[line.function_id].name],
                          strings[functions[line.function_id].filename], line.line, module)
                 for line in loc.line if line.function_id in functions]
        locations[loc.id] = tuple(lines) or (Location(f"{pathlib.PurePosixPath(module).name or '?'}"
                                                      f"+{loc.address:#x}", module=module),)

    def value(sample, name):
        return sample.value[types.index(name)] if name in types else 0
    # A pprof without Go's heap names: its last value is read as bytes in use.
    fallback = not any(t in types for t in ("inuse_space", "alloc_space"))
    stacks: Dict[Tuple[int, ...], CallStack] = {}

    def stack(location_ids) -> CallStack:
        key = tuple(location_ids)
        if key not in stacks:
            stacks[key] = CallStack(frame for loc in key for frame in locations[loc])
        return stacks[key]
    samples = [StackSample(stack(s.location_id),
                           value(s, "alloc_objects"), value(s, "alloc_space"),
                           value(s, "inuse_objects"),
                           s.value[-1] if fallback and s.value else value(s, "inuse_space"))
               for s in profile.sample]
    pid, heap, index, cmdline = _pprof_identity(profile, path)
    return Profile(pid=pid, cmdline=cmdline, heap=heap, dump_index=index,
                   timestamp_ns=profile.time_nanos, sampling_interval_bytes=profile.period,
                   samples=samples, source=str(path))


def _load_file(path: pathlib.Path, search_dirs: Sequence[pathlib.Path]) -> Results:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DroidheapError(f"cannot read {path}: {e.strerror or e}") from e
    if not data:
        raise DroidheapError(f"{path} is empty")
    if data[:2] == _GZIP_MAGIC or path.name.endswith((".pb.gz", ".pprof")):
        return Results([_load_pprof(path, data)], [])
    return _load_trace(path, data, search_dirs)


def _stored_results(directory: pathlib.Path) -> Optional[Results]:
    """What the conversion stored, unless a trace there is newer (symbolized again by other
    tools) or it is of another version."""
    stored = directory / RESULTS_FILE
    try:
        written = stored.stat().st_mtime_ns
        if any((directory / name).stat().st_mtime_ns > written
               for name in (SYMBOLIZED_TRACE, RAW_TRACE) if (directory / name).exists()):
            return None
    except OSError:
        return None
    return read_results(stored)


def load_results(path: pathlib.Path, search_dirs: Sequence[pathlib.Path] = ()) -> Results:
    """Everything in `path` (see the module docstring); raises DroidheapError when nothing can be
    read."""
    path = pathlib.Path(path)
    if not path.exists():
        raise DroidheapError(f"{path} does not exist")
    if not path.is_dir():
        return _load_file(path, search_dirs)
    stored = _stored_results(path)
    if stored is not None:
        return stored
    for name in (SYMBOLIZED_TRACE, RAW_TRACE):
        if (path / name).is_file():
            return _load_file(path / name, search_dirs)
    pprofs = sorted(path.glob("*.pb.gz"))
    if not pprofs:
        raise DroidheapError(f"{path} holds no trace ({SYMBOLIZED_TRACE}, {RAW_TRACE}) and no "
                             "pprof file")
    # A damaged file costs only itself, named, unless nothing else can be read either.
    profiles, warnings = [], []
    for pprof in pprofs:
        try:
            profiles += _load_file(pprof, search_dirs).profiles
        except DroidheapError as e:
            if not profiles and pprof == pprofs[-1]:
                raise
            warnings.append(f"skipped: {e}")
    profiles.sort(key=lambda p: (p.pid, p.dump_index, p.heap))
    return Results(profiles, warnings)
