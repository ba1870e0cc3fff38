"""Rebuilds heap dumps from a trace's packets, resolving interned ids to mappings and frames.

heapprofd-style traces intern mappings, frames and call stacks on a packet sequence
(interned_state.py reads them): in `TracePacket.interned_data`, or, in older traces, in the
ProfilePacket itself. Both persist across dumps until a packet clears the sequence's incremental
state. A dump may be split
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
import operator
from typing import Dict, Iterator, List, Optional, Tuple

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from droidheap.bulk import changed_places, keeps_every_place
from droidheap.trace.counter_tracks import CounterTracks
# Mapping, Frame and Sample are read from here too: what a dump is made of.
from droidheap.trace.frames import (HEAPPROFD_ERROR_PATH, PSEUDO_PREFIX, Frame,  # noqa: F401
                                    Mapping, Sample)
from droidheap.trace.interned_state import MISSING, UNREACHABLE_ROOT, InternedState
from droidheap.trace.process_figures import AllocatorStats, HeapTotals, UnreachableSweep
from droidheap.trace.reader import as_text

# The data source of Android's heapprofd in a trace's config.
HEAPPROFD_DATA_SOURCE = "android.heapprofd"
MALLOC_HEAP = "libc.malloc"  # libc's heap, as Android names it; a dump naming no heap means it
UNREACHABLE_HEAP = "libc.malloc.unreachable"


def size_labels(heap_name: str) -> Tuple[str, str]:
    """How a heap's sampled and exact bytes are measured, as said beside them: (", requested
    sizes", ", usable sizes") for libc's, whose samples count what the program asked for (malloc's
    argument, as heapprofd and heaptrack count) and whose exact totals what the allocator handed
    out, rounded up to its size classes (a few percent more); ("", "") for a heap a program
    registers, which reports one size for both."""
    return (", requested sizes", ", usable sizes") if heap_name == MALLOC_HEAP else ("", "")
_SEQ_INCREMENTAL_STATE_CLEARED = 1
_FRAMES = operator.itemgetter(0)  # Sample.frames


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


@dataclasses.dataclass
class TraceDumps:
    dumps: Dict[int, List[HeapDump]]  # pid -> dumps in trace order
    cmdlines: Dict[int, str]
    # (MONOTONIC_COARSE ns, REALTIME ns) read together, from each clock snapshot in trace order.
    wall_clock_pairs: List[Tuple[int, int]] = dataclasses.field(default_factory=list)
    warnings: List[str] = dataclasses.field(default_factory=list)

    def call_stacks(self) -> Iterator[Tuple[Frame, ...]]:
        """Every call stack the dumps' samples name, each at least once: of each dump, the
        samples at the places that differ from the dump before of its process's heap (the others
        are the very Samples that one had there)."""
        for dumps in self.dumps.values():
            before: Dict[str, List[Sample]] = {}
            for dump in dumps:
                at = changed_places(dump.samples, before.get(dump.heap_name, []))
                yield from map(_FRAMES, map(dump.samples.__getitem__, at))
                before[dump.heap_name] = dump.samples

    def wall_time_ns(self, dump_ns: int) -> int:
        """A dump timestamp (MONOTONIC_COARSE) on the wall clock, through the last snapshot taken
        before it (the first one for earlier times), as the trace processor converts; 0 when no
        snapshot has both clocks."""
        if not self.wall_clock_pairs or not dump_ns:
            return 0
        i = bisect.bisect_right(self.wall_clock_pairs, (dump_ns, float("inf")))
        coarse, realtime = self.wall_clock_pairs[max(0, i - 1)]
        return dump_ns - coarse + realtime


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
    sequences: Dict[int, InternedState] = {}
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
            sequences[seq_id] = InternedState()
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
                samples = seq.samples(key, src)
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
                broken[id(sample.frames)] = any(f.mapping.path.startswith(MISSING)
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
        earlier = result.dumps.setdefault(dump.pid, [])
        previous = next((d for d in reversed(earlier) if d.heap_name == dump.heap_name), None)
        _keep_dropped_call_stacks(previous, dump)
        earlier.append(dump)


def _keep_dropped_call_stacks(previous: Optional[HeapDump], dump: HeapDump) -> None:
    """Android's heapprofd writes a call stack with nothing left in use in one more dump, then
    forgets it: its totals stay what that dump said (Perfetto's trace processor, too, keeps a
    call stack's last totals where a later dump leaves it out). Without this, a dump after the
    churn of a loop would lose all that the loop allocated."""
    if previous is None or previous.at_peak or dump.at_peak:
        return
    # A sequence's dumps share one tuple per call stack (InternedState.callstack), and keep their
    # stacks in order: as a rule each place holds the stack it held before, found by identity
    # with C loops (hashing every frame of every stack would be most of the cost).
    if keeps_every_place(dump.samples, previous.samples,
                         changed_places(dump.samples, previous.samples), _FRAMES):
        return
    stack_ids = set(map(id, map(_FRAMES, dump.samples)))
    dropped = [sample for sample in previous.samples
               if sample.in_use == 0 and id(sample.frames) not in stack_ids]
    if dropped:
        # Equal stacks interned again (after the sequence's state was cleared) are told apart by
        # value, each distinct tuple hashed once (a tuple's hash walks every frame, every time):
        # a stack named by every sample would cost samples x depth.
        present = set({id(frames): frames for frames in map(_FRAMES, dump.samples)}.values())
        kept = [sample for sample in dropped if sample.frames not in present]
        dump.samples.extend(kept)
