"""Rebuilds heap dumps from a trace's packets, resolving interned ids to mappings and frames.

heapprofd-style traces intern mappings, frames and call stacks on a packet sequence: in
`TracePacket.interned_data` (build ids, mapping path components and function names each in their
own table), or, in older traces, in the ProfilePacket itself (one `strings` table for all). Both
persist across dumps until a packet clears the sequence's incremental state. A dump may be split
over several ProfilePackets (`continued` on all but the last); a process may appear in several of
them, its samples spread over the fragments. Before a dump's first fragment, a process_stats packet
and counter tracks (counter_tracks.py) give figures of each process at the dump.

With --unreachable, droidheapd writes what its latest sweep found unreachable in libc's heap as a
heap of its own, UNREACHABLE_HEAP, each stack under a root frame UNREACHABLE_ROOT (the trace
processor keeps figures by call site, not heap), its in-use bytes and blocks the unreachable ones
(ndk_client/daemon/unreachable_heap.h). Read here, it joins libc's dump as `unreachable_samples`,
the stacks as libc's, beside the sweep's figures from the counter tracks (`unreachable`).

Names follow Perfetto's trace processor, so that symbols appended for a mapping (module_symbols,
matched by path and build id) land on the same mapping there:
- a mapping's path is "/" + component for each path component, with a leading "//" reduced to
  "/" (a single component holding a full path); the first unknown component ends the path;
- build id iid 0 means "no build id".
"""
import bisect
import dataclasses
import functools
import operator
from typing import Dict, List, NamedTuple, Optional, Set, Tuple

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from droidheap.apk_library import split_library_path
from droidheap.bulk import misses
from droidheap.trace.counter_tracks import CounterTracks
from droidheap.trace.process_figures import AllocatorStats, HeapTotals, UnreachableSweep
from droidheap.trace.reader import as_text

PSEUDO_PREFIX = "[droidheap"
# The mapping of heapprofd's unwinding errors: one component "ERROR", its frames named "ERROR N".
HEAPPROFD_ERROR_PATH = "/ERROR"
# The data source of Android's heapprofd in a trace's config.
HEAPPROFD_DATA_SOURCE = "android.heapprofd"
MALLOC_HEAP = "libc.malloc"  # libc's heap, as Android names it; a dump naming no heap means it
UNREACHABLE_HEAP = "libc.malloc.unreachable"
UNREACHABLE_ROOT = "[droidheap: unreachable]"
_SEQ_INCREMENTAL_STATE_CLEARED = 1
_SERIALIZED = operator.methodcaller("SerializeToString")
_CALLSTACK_ID = operator.attrgetter("callstack_id")
_FRAMES = operator.itemgetter(0)  # Sample.frames


@dataclasses.dataclass(frozen=True)
class Mapping:
    path: str      # as the trace processor names it (see the module docstring)
    build_id: str  # lower-case hex; "" when unknown
    start: int = 0
    end: int = 0
    offset: int = 0  # file offset of `start`
    load_bias: int = 0
    # File offset of the ELF file's first byte: where an APK stores the library, else 0.
    elf_offset: int = 0

    @functools.cached_property  # asked of every frame by every writer
    def is_pseudo(self) -> bool:
        """Frames the daemon made up (unwind errors, ...): named by their path, never symbolized.
        Path joining turns the component "[droidheap: x]" into "/[droidheap: x]"."""
        return self.display_path.startswith(PSEUDO_PREFIX) or self.path == HEAPPROFD_ERROR_PATH

    @property
    def display_path(self) -> str:
        # "/[vdso]", "/[droidheap: unwind error]": one component that was never a file path.
        return self.path[1:] if self.path.startswith("/[") else self.path

    @property
    def elf_file_offset(self) -> int:
        """The ELF file's own offset of `start`."""
        return self.offset - self.elf_offset

    def pc(self, rel_pc: int) -> int:
        """The process address of `rel_pc` (rel_pc = pc - start + elf_file_offset + load_bias)."""
        return max(0, rel_pc - self.load_bias - self.elf_file_offset + self.start)


class Frame(NamedTuple):
    """A tuple: a trace has one per distinct frame, and a large one hundreds of thousands."""
    mapping: Mapping
    rel_pc: int
    function_name: str = ""  # when the trace itself names the frame


class Sample(NamedTuple):
    """One call stack's figures in one dump: a tuple, as there is one per stack of every dump."""
    frames: Tuple[Frame, ...]  # root (outermost caller) first, as in the trace
    self_allocated: int = 0    # cumulative since the process connected
    self_freed: int = 0
    alloc_count: int = 0
    free_count: int = 0

    @property
    def in_use(self) -> int:
        return self.self_allocated - self.self_freed


@dataclasses.dataclass
class ProcessMemory:
    """What the kernel said the process held at the dump (a process_stats packet), in KiB; for a
    process gone by then, droidheapd's reading as it exited."""
    rss_kb: int = 0
    rss_anon_kb: int = 0
    rss_file_kb: int = 0
    rss_shmem_kb: int = 0  # droidheap's shared buffer is among it
    swap_kb: int = 0


@dataclasses.dataclass
class DumpStats:
    unwinding_errors: int = 0
    heap_samples: int = 0
    map_reparses: int = 0
    total_unwinding_time_us: int = 0
    client_spinlock_blocked_us: int = 0


@dataclasses.dataclass
class HeapDump:
    pid: int
    index: int  # per pid, from 0, in trace order; all heaps of one dump share it
    heap_name: str
    # MONOTONIC_COARSE ns, the clock heapprofd (and so Perfetto's trace processor) uses here.
    timestamp: int
    start_timestamp: int
    sampling_interval_bytes: int
    from_startup: bool = False
    disconnected: bool = False
    ending: str = ""  # how a disconnected process's profile ended (counter_tracks.ENDINGS), if said
    buffer_overran: bool = False
    buffer_corrupted: bool = False
    hit_guardrail: bool = False
    rejected_concurrent: bool = False
    # Its samples hold what was in use when the process's sampled heap was largest (heapprofd's
    # dump_at_max: self_max, read here as allocated and never freed), not totals since the start.
    at_peak: bool = False
    memory: Optional[ProcessMemory] = None  # unknown for a process gone by the dump
    # From counter tracks: None when a figure did not arrive (an older daemon, no mallinfo yet).
    totals: Optional[HeapTotals] = None  # of this dump's heap, cumulative at the dump
    allocator: Optional[AllocatorStats] = None  # the whole process's, the same for each heap
    stats: DumpStats = dataclasses.field(default_factory=DumpStats)
    samples: List[Sample] = dataclasses.field(default_factory=list)
    # libc's heap, with --unreachable: the latest sweep's figures at the dump (None: no sweep was
    # asked for), and what it found by call stack, in_use the unreachable bytes and blocks (empty
    # when it found none, or when it did not run at this dump).
    unreachable: Optional[UnreachableSweep] = None
    unreachable_samples: List[Sample] = dataclasses.field(default_factory=list)
    # The ids of its samples' call stacks (their frames tuples, interned), from when it is
    # finished until the next dump of its process's heap is: what that one is compared with.
    stack_ids: Set[int] = dataclasses.field(default_factory=set, compare=False, repr=False)


@dataclasses.dataclass
class TraceDumps:
    dumps: Dict[int, List[HeapDump]]  # pid -> dumps in trace order
    cmdlines: Dict[int, str]
    # (MONOTONIC_COARSE ns, REALTIME ns) read together, from each clock snapshot in trace order.
    wall_clock_pairs: List[Tuple[int, int]] = dataclasses.field(default_factory=list)
    warnings: List[str] = dataclasses.field(default_factory=list)

    def wall_time_ns(self, dump_ns: int) -> int:
        """A dump timestamp (MONOTONIC_COARSE) on the wall clock, through the last snapshot taken
        before it (the first one for earlier times), as the trace processor converts; 0 when no
        snapshot has both clocks."""
        if not self.wall_clock_pairs or not dump_ns:
            return 0
        i = bisect.bisect_right(self.wall_clock_pairs, (dump_ns, float("inf")))
        coarse, realtime = self.wall_clock_pairs[max(0, i - 1)]
        return dump_ns - coarse + realtime


_MISSING = PSEUDO_PREFIX + ": missing "


def _missing(what: str) -> Mapping:
    """Stands in for an entry the trace refers to but never interned, so no bytes are lost."""
    return Mapping(path=f"{_MISSING}{what}]", build_id="")


class _Tables:
    """One namespace of interned entries. The ProfilePacket style shares one string table for
    paths, build ids and function names; interned_data keeps three. Strings stay raw bytes (build
    ids are binary) until used."""

    def __init__(self, shared_strings: bool):
        self.paths: Dict[int, bytes] = {}
        self.build_ids = self.paths if shared_strings else {}
        self.function_names = self.paths if shared_strings else {}
        # Entries are kept raw and resolved on first use: a frame may arrive before its mapping.
        self.raw_mappings: Dict[int, pb.Mapping] = {}
        self.raw_frames: Dict[int, pb.Frame] = {}
        self.raw_callstacks: Dict[int, List[int]] = {}
        self.mappings: Dict[int, Mapping] = {}
        self.frames: Dict[int, Frame] = {}
        self.callstacks: Dict[int, Tuple[Frame, ...]] = {}


class _Sequence:
    """Interned state of one trusted packet sequence."""

    def __init__(self):
        self.interned = _Tables(shared_strings=False)
        self.packet = _Tables(shared_strings=True)
        self.missing = False  # whether a sample referred to an entry never interned
        # (pid, heap) -> a sample's serialized bytes -> its Sample, in the dump before and in
        # the one being assembled. Figures are cumulative: a stack nothing happened at since is
        # the same Sample again, one object for every dump (most of a long run's samples; their
        # memory, and every later step's work, saved).
        self.samples_before: Dict[Tuple[int, str], Dict[bytes, Sample]] = {}
        self.samples_now: Dict[Tuple[int, str], Dict[bytes, Sample]] = {}
        # By id(Sample) of UNREACHABLE_HEAP, in the dump before and in the one being assembled:
        # the Sample, kept alive, and it without the root frame.
        self._unrooted_before: Dict[int, Tuple[Sample, Sample]] = {}
        self._unrooted_now: Dict[int, Tuple[Sample, Sample]] = {}

    def samples(self, key: Tuple[int, str], samples) -> List[Sample]:
        """The Samples of a dump fragment's ProfilePacket.HeapSample messages. Its hundreds of
        thousands are looked up by C loops (map) in the dump before, by their bytes; only the
        samples new since are read field by field."""
        serialized = list(map(_SERIALIZED, samples))
        found = list(map(self.samples_before.get(key, {}).get, serialized))
        at = list(misses(found))
        new = list(map(samples.__getitem__, at))
        stacks = self._callstacks(list(map(_CALLSTACK_ID, new)))
        for i, s, stack in zip(at, new, stacks):
            found[i] = Sample(stack, s.self_allocated, s.self_freed, s.alloc_count, s.free_count)
        self.samples_now.setdefault(key, {}).update(zip(serialized, found))
        return found

    def dump_finished(self) -> None:
        self.samples_before, self.samples_now = self.samples_now, {}
        self._unrooted_before, self._unrooted_now = self._unrooted_now, {}

    def unrooted(self, samples: List[Sample]) -> List[Sample]:
        """UNREACHABLE_HEAP's samples with their stacks as libc's, and what is unreachable as
        allocated and never freed (allocated - freed in the trace: unreachable_heap.h); each made
        once, so that a Sample the dump before had is the same one again."""
        found = []
        for sample in samples:
            known = self._unrooted_now.get(id(sample)) or self._unrooted_before.get(id(sample))
            if known is None:
                frames = sample.frames
                if frames and frames[0].mapping.display_path == UNREACHABLE_ROOT:
                    frames = frames[1:]
                known = (sample, Sample(frames, sample.in_use, 0,
                                        sample.alloc_count - sample.free_count, 0))
            self._unrooted_now[id(sample)] = known
            found.append(known[1])
        return found

    def add_interned(self, data: pb.InternedData) -> None:
        t = self.interned
        t.paths.update((s.iid, s.str) for s in data.mapping_paths)
        t.build_ids.update((s.iid, s.str) for s in data.build_ids)
        t.function_names.update((s.iid, s.str) for s in data.function_names)
        self._add_entries(t, data.mappings, data.frames, data.callstacks)

    def add_packet_tables(self, packet: pb.ProfilePacket) -> None:
        t = self.packet
        t.paths.update((s.iid, s.str) for s in packet.strings)
        self._add_entries(t, packet.mappings, packet.frames, packet.callstacks)

    @staticmethod
    def _add_entries(t: _Tables, mappings, frames, callstacks) -> None:
        for m in mappings:
            t.raw_mappings[m.iid] = m
        for f in frames:
            t.raw_frames[f.iid] = f
        for c in callstacks:
            t.raw_callstacks[c.iid] = list(c.frame_ids)

    # A trace uses one style or the other; for a mix, the ProfilePacket's own tables win. Looked
    # up per frame of every new stack and per sample of every dump: plain dict lookups.
    def mapping(self, iid: int) -> Mapping:
        for t in (self.packet, self.interned):
            known = t.mappings.get(iid)
            if known is not None:
                return known
            raw = t.raw_mappings.get(iid)
            if raw is not None:
                known = t.mappings[iid] = _make_mapping(raw, t)
                return known
        self.missing = True
        return _missing("mapping")

    def frame(self, iid: int) -> Frame:
        for t in (self.packet, self.interned):
            known = t.frames.get(iid)
            if known is not None:
                return known
            raw = t.raw_frames.get(iid)
            if raw is not None:
                name = t.function_names.get(raw.function_name_id, b"")
                known = t.frames[iid] = Frame(self.mapping(raw.mapping_id), raw.rel_pc,
                                              _text(name))
                return known
        self.missing = True
        return Frame(_missing("frame"), 0)

    def _frames(self, iids: List[int]) -> Tuple[Frame, ...]:
        # Where the ProfilePacket style interned no frame (as a rule), the frames resolved
        # before are found by a C loop (map).
        frames = (list(map(self.interned.frames.get, iids))
                  if not (self.packet.frames or self.packet.raw_frames) else [None] * len(iids))
        for i in misses(frames):
            frames[i] = self.frame(iids[i])
        return tuple(frames)

    def _callstacks(self, iids: List[int]) -> List[Tuple[Frame, ...]]:
        # As _frames: the stacks resolved before found by a C loop.
        stacks = (list(map(self.interned.callstacks.get, iids))
                  if not (self.packet.callstacks or self.packet.raw_callstacks)
                  else [None] * len(iids))
        for i in misses(stacks):
            stacks[i] = self.callstack(iids[i])
        return stacks

    def callstack(self, iid: int) -> Tuple[Frame, ...]:
        for t in (self.packet, self.interned):
            known = t.callstacks.get(iid)
            if known is not None:
                return known
            raw = t.raw_callstacks.get(iid)
            if raw is not None:
                known = t.callstacks[iid] = self._frames(raw)
                return known
        self.missing = True
        return (Frame(_missing("callstack"), 0),)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _make_mapping(raw: pb.Mapping, t: _Tables) -> Mapping:
    path = ""
    for sid in raw.path_string_ids:
        if sid not in t.paths:
            break
        path += "/" + _text(t.paths[sid])
    if path.startswith("//"):
        path = path[1:]
    build_id = t.build_ids.get(raw.build_id, b"") if raw.build_id else b""
    # exact_offset is the mapping's offset and start_offset the ELF file's (libunwindstack's
    # elf_start_offset). Android 10's heapprofd gives start_offset alone, and droidheap's traces
    # before 2026-11-27 the mapping's offset in both: there the ELF file starts at 0, unless the
    # path names a library inside an APK.
    offset, elf_offset = raw.start_offset, 0
    if raw.HasField("exact_offset"):
        offset = raw.exact_offset
        if raw.start_offset != raw.exact_offset or split_library_path(path):
            elf_offset = min(raw.start_offset, offset)
    return Mapping(path=path, build_id=build_id.hex(), start=raw.start, end=raw.end,
                   offset=offset, load_bias=raw.load_bias, elf_offset=elf_offset)


def _new_dump(pid: int, index: int, src: pb.ProfilePacket.ProcessHeapSamples) -> HeapDump:
    return HeapDump(pid=pid, index=index, heap_name=as_text(src.heap_name) or MALLOC_HEAP,
                    timestamp=src.timestamp, start_timestamp=src.start_timestamp,
                    sampling_interval_bytes=src.sampling_interval_bytes)


def _merge_header(dump: HeapDump, src: pb.ProfilePacket.ProcessHeapSamples) -> None:
    """Fragments of one dump repeat the header; any fragment may carry a flag or the stats."""
    dump.timestamp = dump.timestamp or src.timestamp
    dump.start_timestamp = dump.start_timestamp or src.start_timestamp
    dump.sampling_interval_bytes = dump.sampling_interval_bytes or src.sampling_interval_bytes
    for flag in ("from_startup", "disconnected", "buffer_overran", "buffer_corrupted",
                 "hit_guardrail", "rejected_concurrent"):
        setattr(dump, flag, getattr(dump, flag) or getattr(src, flag))
    if src.HasField("stats"):
        s = src.stats
        dump.stats = DumpStats(s.unwinding_errors, s.heap_samples, s.map_reparses,
                               s.total_unwinding_time_us, s.client_spinlock_blocked_us)


def rebuild_dumps(packets: List[pb.TracePacket]) -> TraceDumps:
    result = TraceDumps(dumps={}, cmdlines={})
    sequences: Dict[int, _Sequence] = {}
    missing = False  # whether some sequence, now or before a restart, lacked an entry
    # Per sequence: the dump being assembled, (pid, heap) -> HeapDump.
    pending: Dict[int, Dict[Tuple[int, str], HeapDump]] = {}
    # Per sequence: pid -> what the process_stats packet before the dump being assembled said.
    memory: Dict[int, Dict[int, ProcessMemory]] = {}
    # Per sequence: its counter tracks, which outlive a restart (they are not incremental state).
    counters: Dict[int, CounterTracks] = {}
    for packet in packets:
        seq_id = packet.trusted_packet_sequence_id
        if packet.sequence_flags & _SEQ_INCREMENTAL_STATE_CLEARED or seq_id not in sequences:
            missing = missing or (seq_id in sequences and sequences[seq_id].missing)
            sequences[seq_id] = _Sequence()
        seq = sequences[seq_id]
        tracks = counters.setdefault(seq_id, CounterTracks())
        if packet.HasField("process_tree"):
            for proc in packet.process_tree.processes:
                result.cmdlines[proc.pid] = " ".join(map(as_text, proc.cmdline))
        if packet.HasField("clock_snapshot"):
            clocks = {c.clock_id: c.timestamp for c in packet.clock_snapshot.clocks}
            if pb.BUILTIN_CLOCK_MONOTONIC_COARSE in clocks and pb.BUILTIN_CLOCK_REALTIME in clocks:
                bisect.insort(result.wall_clock_pairs, (clocks[pb.BUILTIN_CLOCK_MONOTONIC_COARSE],
                                                        clocks[pb.BUILTIN_CLOCK_REALTIME]))
        if packet.HasField("process_stats"):
            for proc in packet.process_stats.processes:
                memory.setdefault(seq_id, {})[proc.pid] = ProcessMemory(
                    proc.vm_rss_kb, proc.rss_anon_kb, proc.rss_file_kb, proc.rss_shmem_kb,
                    proc.vm_swap_kb)
        if packet.HasField("track_descriptor"):
            tracks.add_descriptor(packet.track_descriptor)
        if packet.HasField("track_event"):
            tracks.add_event(packet.track_event)
        if packet.HasField("interned_data"):
            seq.add_interned(packet.interned_data)
        if not packet.HasField("profile_packet"):
            continue
        profile = packet.profile_packet
        seq.add_packet_tables(profile)
        current = pending.setdefault(seq_id, {})
        for src in profile.process_dumps:
            key = (src.pid, as_text(src.heap_name) or MALLOC_HEAP)
            if key not in current:
                index = _next_index(result, current, src.pid)
                current[key] = _new_dump(src.pid, index, src)
            dump = current[key]
            dump.memory = memory.get(seq_id, {}).get(src.pid, dump.memory)
            dump.totals = tracks.totals(src.pid, dump.heap_name)
            dump.allocator = tracks.allocator(src.pid)
            dump.ending = tracks.ending(src.pid)
            if dump.heap_name == MALLOC_HEAP:
                dump.unreachable = tracks.unreachable(src.pid)
            _merge_header(dump, src)
            # A dump at the peak (heapprofd's dump_at_max) gives every sample self_max: asked
            # of its first, not of each of hundreds of thousands.
            if src.samples and (src.samples[0].HasField("self_max") or
                                src.samples[0].HasField("self_max_count")):
                dump.at_peak = True
                samples = [Sample(seq.callstack(s.callstack_id), s.self_max, 0, s.self_max_count,
                                  0) for s in src.samples]
            else:
                samples = seq.samples(key, src.samples)
            dump.samples.extend(seq.unrooted(samples) if dump.heap_name == UNREACHABLE_HEAP
                                else samples)
        if not profile.continued:
            seq.dump_finished()
            _finish(result, pending.pop(seq_id))
            memory.pop(seq_id, None)
            tracks.dump_finished()
    for unfinished in pending.values():
        if unfinished:
            result.warnings.append("the last dump was cut short (its final fragment is missing); "
                                   "kept what arrived")
            _finish(result, unfinished)
    # Android 10's heapprofd writes no interval in its dumps: the one its session asked for, as
    # traced recorded the session's config, is the one it sampled at.
    configured = _configured_interval(packets)
    for dumps in result.dumps.values():
        for dump in dumps:
            dump.sampling_interval_bytes = dump.sampling_interval_bytes or configured
    if missing or any(seq.missing for seq in sequences.values()):
        _count_missing(result)
    return result


def _count_missing(result: TraceDumps) -> None:
    broken: Dict[int, bool] = {}  # by call stack: every dump shares a sequence's tuples
    unknown = 0
    for dumps in result.dumps.values():
        for sample in (s for d in dumps for s in d.samples):
            if id(sample.frames) not in broken:
                broken[id(sample.frames)] = any(f.mapping.path.startswith(_MISSING)
                                                for f in sample.frames)
            unknown += broken[id(sample.frames)]
    if unknown:
        result.warnings.append(f"{unknown} samples refer to call stacks, frames or mappings "
                               "missing from the trace")


def _configured_interval(packets: List[pb.TracePacket]) -> int:
    """The sampling interval of the heapprofd data source in the trace's config; 0 if none."""
    for packet in packets:
        for source in packet.trace_config.data_sources:
            if source.config.name == HEAPPROFD_DATA_SOURCE:
                return source.config.heapprofd_config.sampling_interval_bytes
    return 0


def _next_index(result: TraceDumps, current: Dict[Tuple[int, str], HeapDump], pid: int) -> int:
    for (other_pid, _), dump in current.items():
        if other_pid == pid:
            return dump.index
    done = result.dumps.get(pid, [])
    return done[-1].index + 1 if done else 0


def _finish(result: TraceDumps, current: Dict[Tuple[int, str], HeapDump]) -> None:
    for (pid, heap), dump in list(current.items()):
        libc = current.get((pid, MALLOC_HEAP))
        if heap == UNREACHABLE_HEAP and libc is not None:
            del current[(pid, heap)]
            if libc.unreachable is not None and libc.unreachable.swept:
                libc.unreachable_samples = dump.samples
    for dump in current.values():
        dump.stack_ids = set(map(id, map(_FRAMES, dump.samples)))  # C loops
        earlier = result.dumps.setdefault(dump.pid, [])
        previous = next((d for d in reversed(earlier) if d.heap_name == dump.heap_name), None)
        _keep_dropped_call_stacks(previous, dump)
        if previous is not None:
            previous.stack_ids = set()  # a set per dump of a long run would cost 100s of MB
        earlier.append(dump)


def _keep_dropped_call_stacks(previous: Optional[HeapDump], dump: HeapDump) -> None:
    """Android's heapprofd writes a call stack with nothing left in use in one more dump, then
    forgets it: its totals stay what that dump said (Perfetto's trace processor, too, keeps a
    call stack's last totals where a later dump leaves it out). Without this, a dump after the
    churn of a loop would lose all that the loop allocated."""
    if previous is None or previous.at_peak or dump.at_peak:
        return
    # By identity first: a sequence's dumps share one tuple per call stack (_Sequence.callstack),
    # and hashing every frame of every stack is most of the cost. Equal stacks interned again
    # (after the sequence's state was cleared) are told apart by value.
    if previous.stack_ids <= dump.stack_ids:  # as a rule no stack is left out
        return
    dropped = [sample for sample in previous.samples
               if sample.in_use == 0 and id(sample.frames) not in dump.stack_ids]
    if dropped:
        # Each distinct tuple hashed once (a tuple's hash walks every frame, every time): a
        # stack named by every sample would cost samples x depth.
        present = set({id(frames): frames for frames in map(_FRAMES, dump.samples)}.values())
        kept = [sample for sample in dropped if sample.frames not in present]
        dump.samples.extend(kept)
        dump.stack_ids.update(map(id, map(_FRAMES, kept)))
