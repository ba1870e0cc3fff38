"""Reads what the reports work on (model.py) from any of: an output directory (what its
conversion stored, store.py; else its symbolized-trace, else its raw-trace, else its pprof
files), a Perfetto trace (ours or heapprofd's; symbolized by the module_symbols packets it
carries, else here) or a pprof file.
"""
import pathlib
import re
from typing import Dict, Optional, Sequence, Tuple

from droidheap.bounded_inflate import inflate
from droidheap.errors import DroidheapError
from droidheap.results.model import Location, Profile, Results, StackSample, Unreachable
from droidheap.results.sites import CallStack, StackBudget
from droidheap.results.store import RESULTS_FILE, read_results

SYMBOLIZED_TRACE = "symbolized-trace"
RAW_TRACE = "raw-trace"
_GZIP_MAGIC = b"\x1f\x8b"
_PACKET_TAG = b"\x0a"  # Trace.packet (field 1, length-delimited): how every trace begins
# pprof files compress 5 to 10 times (droidheap's about 10); parsed, each inflated byte of one
# costs ten more (protobuf's messages, then Locations), so past this a file is refused.
PPROF_RATIO = 32


def _load_trace(path: pathlib.Path, data: bytes, search_dirs: Sequence[pathlib.Path]) -> Results:
    # The trace's readers (protobuf, pyelftools) load only here: `report` of an output directory
    # reads what its conversion stored, and needs none of them.
    from droidheap.made_here import made_here
    from droidheap.results.from_trace import profiles_from_dumps
    from droidheap.symbol_cache import SymbolCache
    from droidheap.symbolizer import SymbolTable, Symbolizer, symbolize_dumps
    from droidheap.trace.heap_dumps import rebuild_dumps
    from droidheap.trace.reader import parse_trace
    from droidheap.trace.symbolized import read_module_symbols
    contents = parse_trace(data)
    if not contents.packets:
        raise DroidheapError(f"{path} is cut short or damaged before its first packet ended: "
                             "nothing in it can be read" if data[:1] == _PACKET_TAG else
                             f"{path} is neither a Perfetto trace nor a pprof file")
    dumps = rebuild_dumps(contents.packets)
    damaged = contents.unframed_bytes or contents.corrupt_packets
    if damaged and not dumps.dumps:
        # Not "no heap dumps", as of a program that never allocated: the dumps were in what is lost.
        raise DroidheapError(f"{path} is cut short or damaged after {contents.intact_length} "
                             "bytes, with no whole heap dump before: nothing in it can be read")
    # Named: a report of several inputs (diff's two) says which one is damaged.
    warnings = [f"{path}: {w}" for w in contents.warnings + dumps.warnings]
    modules = read_module_symbols(contents.packets)
    if modules:
        symbols = SymbolTable(modules)
    else:
        symbolizer = Symbolizer(search_dirs, cache=SymbolCache(), host_paths=made_here(data))
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
    from google.protobuf.message import DecodeError
    from droidheap.pprof import Profile as PprofProfile  # the message class
    if data[:2] == _GZIP_MAGIC:
        data = inflate(data, str(path), ratio=PPROF_RATIO)
    try:
        profile = PprofProfile.FromString(data)
    except DecodeError as e:
        raise DroidheapError(f"{path} is not a readable pprof file: {e}") from e
    try:
        return _pprof_profile(path, profile)
    except (IndexError, KeyError, ValueError) as e:  # ids and indexes that point nowhere
        raise DroidheapError(f"{path} is a damaged pprof file: {type(e).__name__} {e}") from e


def _pprof_profile(path: pathlib.Path, profile) -> Profile:
    from droidheap.pprof import UNREACHABLE_SAMPLE_TYPES
    # A sweep's (droidheap --unreachable): samples of their own on the heap's stacks, 0 in the
    # heap's four values.
    (unreachable_objects, _), (unreachable_space, _) = UNREACHABLE_SAMPLE_TYPES
    strings = profile.string_table
    types = [strings[t.type] for t in profile.sample_type]
    functions = {f.id: f for f in profile.function}
    mappings = {m.id: strings[m.filename] for m in profile.mapping}
    # A location's Locations are made when a stack first names it, after the budget has counted
    # its lines: a file may hold millions of lines no sample names, or one location of millions.
    location_at = {loc.id: i for i, loc in enumerate(profile.location)}  # the last of an id
    locations: Dict[int, Tuple[Location, ...]] = {}

    def location(at: int) -> Tuple[Location, ...]:
        if at not in locations:
            loc = profile.location[at]
            module = mappings.get(loc.mapping_id, "")
            lines = [Location(strings[functions[line.function_id].name],
                              strings[functions[line.function_id].filename], line.line, module)
                     for line in loc.line if line.function_id in functions]
            locations[at] = tuple(lines) or (Location(
                f"{pathlib.PurePosixPath(module).name or '?'}+{loc.address:#x}", module=module),)
        return locations[at]

    # Each value's column (the first of its name), found once, not per sample: a file may list
    # thousands of sample types.
    columns: Dict[str, int] = {}
    for i, name in enumerate(types):
        columns.setdefault(name, i)

    def value(sample, name):
        column = columns.get(name)
        return sample.value[column] if column is not None else 0
    # A pprof without Go's heap names: its last value not of a sweep is read as bytes in use.
    heap_columns = [i for i, name in enumerate(types)
                    if name not in (unreachable_objects, unreachable_space)]
    fallback = heap_columns[-1] if heap_columns and not any(
        t in columns for t in ("inuse_space", "alloc_space")) else None
    stacks: Dict[Tuple[int, ...], CallStack] = {}
    budget = StackBudget(str(path))

    def stack(location_ids) -> CallStack:
        key = tuple(location_ids)
        if key not in stacks:
            found = [location_at[loc] for loc in key]
            budget.spend(len(found), sum(max(1, len(profile.location[at].line)) for at in found))
            stacks[key] = CallStack(frame for at in found for frame in location(at))
        return stacks[key]
    samples = [StackSample(stack(s.location_id),
                           value(s, "alloc_objects"), value(s, "alloc_space"),
                           value(s, "inuse_objects"),
                           s.value[fallback] if fallback is not None and fallback < len(s.value)
                           else value(s, "inuse_space"))
               for s in profile.sample]
    unreachable = None
    if unreachable_objects in columns or unreachable_space in columns:
        found = [(value(s, unreachable_objects), value(s, unreachable_space))
                 for s in profile.sample]
        unreachable = Unreachable([StackSample(sample.stack, 0, 0, *leaked)
                                   for sample, leaked in zip(samples, found) if any(leaked)])
        # A sample of the sweep's (none of the heap's figures) is not one of the heap's.
        samples = [sample for sample, leaked in zip(samples, found)
                   if any(sample[1:]) or not any(leaked)]
    pid, heap, index, cmdline = _pprof_identity(profile, path)
    return Profile(pid=pid, cmdline=cmdline, heap=heap, dump_index=index,
                   timestamp_ns=profile.time_nanos, sampling_interval_bytes=profile.period,
                   samples=samples, unreachable=unreachable, source=str(path))


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
