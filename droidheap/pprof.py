"""Writes heap dumps as pprof profiles (`go tool pprof`), one gzip'd file per process and dump.

The message classes are built (message_classes.py) from pprof's profile.proto
(github.com/google/pprof, proto/profile.proto), as _SCHEMA transcribes it. Sample types use Go's
heap-profile names so that `-sample_index=alloc_space` / `-inuse_space` work; the default is
in-use bytes, like heapprofd's. A dump of libc's heap that droidheapd swept for unreachable memory
(--unreachable) has two more, `unreachable_objects` and `unreachable_space`: what the sweep found
unreachable, in samples of their own (0 in the four others) on the same stacks.
"""
import dataclasses
import itertools
import operator
import pathlib
import re
from typing import Callable, Dict, List, Sequence, Set, Tuple

from droidheap.bulk import carried_over, keeps_every_place, made_once, misses
from droidheap.errors import DroidheapError
from droidheap.message_classes import message_classes
from droidheap.output_files import write_gzip_output
from droidheap.trace.reader import encode_bytes_field
from droidheap.symbolizer import SymbolTable
from droidheap.trace.heap_dumps import Frame, HeapDump, Mapping, Sample, size_labels

# pprof shares no stacks: each sample lists its stack's locations, so a stack named by every
# sample costs its depth times theirs. The unwinders that write traces stop at a few hundred
# frames (droidheapd at 256); a deeper stack is refused, not repeated per sample.
MAX_STACK_FRAMES = 2048
# As in profile.proto (message_classes.Schema).
_SCHEMA = [
    ("Profile", [("sample_type", 1, "ValueType", True), ("sample", 2, "Sample", True),
                 ("mapping", 3, "Mapping", True), ("location", 4, "Location", True),
                 ("function", 5, "Function", True), ("string_table", 6, "string", True),
                 ("drop_frames", 7, "int64", False), ("keep_frames", 8, "int64", False),
                 ("time_nanos", 9, "int64", False), ("duration_nanos", 10, "int64", False),
                 ("period_type", 11, "ValueType", False), ("period", 12, "int64", False),
                 ("comment", 13, "int64", True), ("default_sample_type", 14, "int64", False)]),
    ("ValueType", [("type", 1, "int64", False), ("unit", 2, "int64", False)]),
    ("Sample", [("location_id", 1, "uint64", True), ("value", 2, "int64", True),
                ("label", 3, "Label", True)]),
    ("Label", [("key", 1, "int64", False), ("str", 2, "int64", False),
               ("num", 3, "int64", False), ("num_unit", 4, "int64", False)]),
    ("Mapping", [("id", 1, "uint64", False), ("memory_start", 2, "uint64", False),
                 ("memory_limit", 3, "uint64", False), ("file_offset", 4, "uint64", False),
                 ("filename", 5, "int64", False), ("build_id", 6, "int64", False),
                 ("has_functions", 7, "bool", False), ("has_filenames", 8, "bool", False),
                 ("has_line_numbers", 9, "bool", False), ("has_inline_frames", 10, "bool", False)]),
    ("Location", [("id", 1, "uint64", False), ("mapping_id", 2, "uint64", False),
                  ("address", 3, "uint64", False), ("line", 4, "Line", True),
                  ("is_folded", 5, "bool", False)]),
    ("Line", [("function_id", 1, "uint64", False), ("line", 2, "int64", False)]),
    ("Function", [("id", 1, "uint64", False), ("name", 2, "int64", False),
                  ("system_name", 3, "int64", False), ("filename", 4, "int64", False),
                  ("start_line", 5, "int64", False)]),
]


_MESSAGES = message_classes("droidheap/pprof_profile.proto", "perftools.profiles", _SCHEMA)
Profile = _MESSAGES["Profile"]
_FRAMES = operator.itemgetter(0)  # Sample.frames
_SAMPLE_FIELD = Profile.DESCRIPTOR.fields_by_name["sample"].number
_LOCATION_FIELD = Profile.DESCRIPTOR.fields_by_name["location"].number

SAMPLE_TYPES = [("alloc_objects", "count"), ("alloc_space", "bytes"),
                ("inuse_objects", "count"), ("inuse_space", "bytes")]
UNREACHABLE_SAMPLE_TYPES = [("unreachable_objects", "count"), ("unreachable_space", "bytes")]
DEFAULT_SAMPLE_TYPE = "inuse_space"


class _Strings:
    """One file's string table (string_table[0] must be "")."""

    def __init__(self, profile):
        self.profile = profile
        self.ids: Dict[str, int] = {}
        self.id("")

    def id(self, text: str) -> int:
        if text not in self.ids:
            self.ids[text] = len(self.ids)
            self.profile.string_table.append(text)
        return self.ids[text]


class PprofWriter:
    """Writes the pprof files of one trace's dumps. Mappings, functions and locations are
    numbered once for the whole trace (non-zero: 0 means "none" in pprof; ids need only be unique
    within a file) and each call stack's location ids are listed once; a dump's samples are
    compared with the dump before's, place by place, and only the ones that changed are written
    anew. So a dump costs a comparison per sample, not a lookup per frame; each file holds the
    entries its samples use and its own string table."""

    def __init__(self, symbols: SymbolTable):
        self.symbols = symbols
        self._mapping_ids: Dict[Mapping, int] = {}
        self._function_ids: Dict[Tuple[str, str], int] = {}
        self._location_ids: Dict[Tuple[Mapping, int], int] = {}
        # By location id (0: none): a location as a framed Profile.location field (its mapping
        # and function ids are global: the same bytes in every file), its mapping id and its
        # function ids; read for a whole dump at once by C loops.
        self._location_bytes: List[bytes] = [b""]
        self._location_mapping: List[int] = [0]
        self._location_functions: List[Tuple[int, ...]] = [()]
        # By id(frame): its location id. A trace's frames are interned objects, kept alive here
        # so that their ids stay theirs; equal frames interned twice share a location by value.
        self._frame_ids: Dict[int, int] = {}
        self._frames: List[Frame] = []
        # By id(frames): (frames, (their location ids, those as a serialized Sample.location_id)).
        self._stacks: Dict[int, Tuple[Sequence[Frame], Tuple[List[int], bytes]]] = {}
        # By (pid, heap) and by (pid, heap, "unreachable"): the last dump written of a process's
        # heap, and of what its sweeps found unreachable, that the next is written against.
        self._last: Dict[tuple, _Written] = {}

    def _mapping(self, mapping: Mapping) -> int:
        if mapping.is_pseudo:
            return 0
        return self._mapping_ids.setdefault(mapping, len(self._mapping_ids) + 1)

    def _function(self, name: str, file: str) -> int:
        return self._function_ids.setdefault((name, file), len(self._function_ids) + 1)

    def _location(self, frame: Frame) -> int:
        key = (frame.mapping, frame.rel_pc)
        if key not in self._location_ids:
            self._location_ids[key] = len(self._location_ids) + 1
            mapping_id = self._mapping(frame.mapping)
            message = _MESSAGES["Location"](
                id=self._location_ids[key], mapping_id=mapping_id,
                address=frame.mapping.pc(frame.rel_pc) if mapping_id else 0)
            for line in self.symbols.lines(frame):
                message.line.add(function_id=self._function(line.function, line.file),
                                 line=line.line)
            self._location_bytes.append(encode_bytes_field(_LOCATION_FIELD,
                                                           message.SerializeToString()))
            self._location_mapping.append(mapping_id)
            self._location_functions.append(tuple(line.function_id for line in message.line))
        return self._location_ids[key]

    def _stack(self, frames: Sequence[Frame]) -> Tuple[List[int], bytes]:
        """A stack's location ids, and those as a serialized Sample.location_id. Perfetto's frames
        are root first, pprof's leaf first."""
        if len(frames) > MAX_STACK_FRAMES:
            raise DroidheapError(f"a call stack of {len(frames)} frames is deeper than any "
                                 "unwinder writes: pprof files, which repeat a stack for every "
                                 f"sample, take at most {MAX_STACK_FRAMES}")
        # Frames seen before (most of them) found by a C loop (map), by identity.
        ids = list(map(self._frame_ids.get, map(id, reversed(frames))))
        for j in misses(ids):
            frame = frames[len(frames) - 1 - j]
            ids[j] = self._frame_ids[id(frame)] = self._location(frame)
            self._frames.append(frame)
        return ids, _MESSAGES["Sample"](location_id=ids).SerializeToString()

    def _written(self, key: tuple, samples: List[Sample], kind: str, at_peak: bool) -> "_Written":
        """The samples' framed Sample fields, as `kind` (HEAP_KIND, SWEPT_KIND or
        UNREACHABLE_KIND) in a dump at the peak or not, and their stacks' location ids: those of
        the dump before of stream `key` where it held the same Sample at the same place (a stack
        nothing happened at between dumps is one Sample: heap_dumps), the others made."""
        last = self._last.get(key)
        if last is None or (last.kind, last.at_peak) != (kind, at_peak):
            last = _Written([], [], kind, at_peak, set())
        framed, at = carried_over(samples, last.samples, last.framed,
                                  lambda changed: self._frame_samples(changed, kind, at_peak))
        # As a rule a changed place holds the same stack as before and the new stacks come after
        # the places before: the locations before, plus the new stacks'. Else all are looked up.
        if keeps_every_place(samples, last.samples, at, _FRAMES):
            locations, new = set(last.locations), at[len(at) - (len(samples) - len(last.samples)):]
        else:
            locations, new = set(), range(len(samples))
        for stack in set(map(id, map(_FRAMES, map(samples.__getitem__, new)))):
            locations.update(self._stacks[stack][1][0])
        self._last[key] = _Written(samples, framed, kind, at_peak, locations)
        return self._last[key]

    def _frame_samples(self, samples: List[Sample], kind: str, at_peak: bool) -> List[bytes]:
        """The samples' framed Sample fields (b"" for a sample of no figures)."""
        framed = []
        make = _MESSAGES["Sample"]
        stacks = made_once(list(map(_FRAMES, samples)), self._stacks, self._stack)
        for sample, stack in zip(samples, stacks):
            _, allocated, _, alloc_count, free_count = sample
            if kind == UNREACHABLE_KIND:  # unreachable: in use, never freed (heap_dumps)
                values = (0, 0, 0, 0, alloc_count - free_count, sample.in_use)
            elif at_peak:  # what was in use at the peak; what was allocated is not known
                values = (0, 0, alloc_count - free_count, sample.in_use)
            else:
                values = (alloc_count, allocated, alloc_count - free_count, sample.in_use)
            if kind == SWEPT_KIND:
                values += (0, 0)
            # Two serialized Samples, one with its location ids and one with its values, joined
            # are one with both: the ids' bytes are made once per stack.
            framed.append(encode_bytes_field(
                _SAMPLE_FIELD, stack[1] + make(value=values).SerializeToString()
            ) if any(values) else b"")
        return framed

    def profile(self, dump: HeapDump, cmdline: str = "", time_nanos: int = 0):
        """The pprof Profile message for one dump (values cumulative since the process
        connected, in-use = allocated - freed)."""
        return Profile.FromString(self._serialized(dump, cmdline, time_nanos)[0])

    def _serialized(self, dump: HeapDump, cmdline: str, time_nanos: int) -> Tuple[bytes, int]:
        """The Profile's bytes, and how many samples it holds. Its samples and locations are
        appended as bytes made once per trace where they repeat (a repeated field's entries may
        come anywhere in a message): a large trace has hundreds of thousands of each, most of them
        in every dump."""
        p = Profile()
        strings = _Strings(p)
        swept = dump.unreachable is not None and dump.unreachable.swept
        for kind, unit in SAMPLE_TYPES + (UNREACHABLE_SAMPLE_TYPES if swept else []):
            p.sample_type.add(type=strings.id(kind), unit=strings.id(unit))
        p.default_sample_type = strings.id(DEFAULT_SAMPLE_TYPE)
        p.period_type.type, p.period_type.unit = strings.id("space"), strings.id("bytes")
        p.period = dump.sampling_interval_bytes
        p.time_nanos = time_nanos
        if dump.start_timestamp and dump.timestamp > dump.start_timestamp:
            p.duration_nanos = dump.timestamp - dump.start_timestamp
        p.comment.extend(strings.id(c) for c in _comments(dump, cmdline))
        heap = self._written((dump.pid, dump.heap_name), dump.samples,
                             SWEPT_KIND if swept else HEAP_KIND, dump.at_peak)
        samples, used = heap.framed, heap.locations
        if swept:
            unreachable = self._written((dump.pid, dump.heap_name, UNREACHABLE_KIND),
                                        dump.unreachable_samples, UNREACHABLE_KIND, dump.at_peak)
            samples, used = samples + unreachable.framed, used | unreachable.locations
        used = sorted(used)
        locations = b"".join(map(self._location_bytes.__getitem__, used))
        mappings = set(map(self._location_mapping.__getitem__, used))
        functions = set(itertools.chain.from_iterable(
            map(self._location_functions.__getitem__, used)))
        # pprof takes the first mapping for the main binary ("File: ..." heads `go tool pprof
        # -top`): the program's own mappings go first, not libc's or the loader's.
        program = pathlib.PurePosixPath(cmdline.split(" ")[0]).name
        for mapping, mapping_id in sorted(
                ((m, i) for m, i in self._mapping_ids.items() if i in mappings),
                key=lambda item: pathlib.PurePosixPath(item[0].path).name != program):
            self._add_mapping(p, strings, mapping, mapping_id)
        for (name, file), function_id in self._function_ids.items():
            if function_id in functions:
                p.function.add(id=function_id, name=strings.id(name),
                               system_name=strings.id(name), filename=strings.id(file))
        # One join, one copy of a dump's megabytes (a + b + c copies them twice more).
        return (b"".join(itertools.chain((p.SerializeToString(),), samples, (locations,))),
                len(samples) - samples.count(b""))

    def _add_mapping(self, p, strings: _Strings, mapping: Mapping, mapping_id: int) -> None:
        module = self.symbols.modules.get((mapping.path, mapping.build_id))
        p.mapping.add(
            id=mapping_id, memory_start=mapping.start, memory_limit=mapping.end,
            file_offset=mapping.elf_file_offset, filename=strings.id(mapping.path),
            build_id=strings.id(mapping.build_id),
            # Set when we symbolized, so that pprof does not try again on its own.
            has_functions=bool(module and module.has_functions),
            has_filenames=bool(module and module.has_filenames),
            has_line_numbers=bool(module and module.has_line_numbers),
            has_inline_frames=bool(module and module.has_inline_frames))

    def write(self, dump: HeapDump, out_dir: pathlib.Path, cmdline: str = "",
              time_nanos: int = 0,
              write_gzip: Callable[[pathlib.Path, bytes], None] = write_gzip_output
              ) -> "PprofFile":
        """The dump's file, written by `write_gzip` (BackgroundWrites's, to compress while the
        next dump is made)."""
        data, samples = self._serialized(dump, cmdline, time_nanos)
        path = out_dir / pprof_file_name(dump)
        write_gzip(path, data)
        return PprofFile(path, dump.pid, dump.index, dump.heap_name, samples)


# How a sample is written: a dump's own, in a file of SAMPLE_TYPES or (swept) of those and
# UNREACHABLE_SAMPLE_TYPES, or one of what the sweep found unreachable.
HEAP_KIND, SWEPT_KIND, UNREACHABLE_KIND = "heap", "swept heap", "unreachable"


@dataclasses.dataclass
class _Written:
    """One stream's last dump as written (PprofWriter._written)."""
    samples: List[Sample]
    framed: List[bytes]  # each sample's framed Profile.sample field (b"": nothing to say)
    kind: str
    at_peak: bool
    locations: Set[int]  # the location ids of the samples' stacks


def _comments(dump: HeapDump, cmdline: str) -> List[str]:
    comments = [cmdline or f"pid {dump.pid}",
                f"droidheap dump {dump.index} of pid {dump.pid}, heap {dump.heap_name}, "
                f"sampling interval {dump.sampling_interval_bytes} bytes"]
    flags = [name.replace("_", " ") for name in ("from_startup", "disconnected", "buffer_overran",
                                                 "buffer_corrupted", "hit_guardrail", "at_peak")
             if getattr(dump, name)]
    if flags:
        comments.append("flags: " + ", ".join(flags))
    if dump.totals:
        t = dump.totals
        comments.append(f"exact since profiling began{size_labels(dump.heap_name)[1]}: "
                        f"{t.alloc_count} allocations "
                        f"({t.alloc_bytes} bytes), {t.free_count} frees ({t.free_bytes} bytes)")
    if dump.allocator:
        a = dump.allocator
        comments.append(f"mallinfo: {a.in_use_bytes} bytes in use, {a.free_bytes} free, "
                        f"{a.system_bytes} from the system" +
                        (" (not read at exit)" if a.not_read_at_exit else ""))
    u = dump.unreachable
    if u and u.swept:
        comments.append(f"unreachable: {u.blocks} of {u.blocks_swept} sampled blocks "
                        f"({u.bytes} bytes)" + (f"; {u.note}" if u.note else ""))
    elif u:
        comments.append(f"unreachable memory not swept: {u.note}")
    return comments


def pprof_file_name(dump: HeapDump) -> str:
    heap = re.sub(r"[^A-Za-z0-9._-]", "_", dump.heap_name) or "heap"
    return f"heap_dump.{dump.index}.{dump.pid}.{heap}.pb.gz"


@dataclasses.dataclass
class PprofFile:
    path: pathlib.Path
    pid: int
    dump_index: int
    heap_name: str
    samples: int
