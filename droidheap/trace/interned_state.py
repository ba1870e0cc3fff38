"""What one trusted packet sequence of a heapprofd-style trace has interned, resolved on first use:
mappings, frames and call stacks from `TracePacket.interned_data` (build ids, mapping path
components and function names in tables of their own) or, in older traces, from the ProfilePacket
itself (one `strings` table for all); and the samples of the dump before, so that a stack nothing
happened at is one Sample for every dump. Owned by heap_dumps.rebuild_dumps, one per sequence,
replaced when the sequence's incremental state is cleared.
"""
import operator
from typing import Dict, List, Tuple

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from droidheap.apk_library import split_library_path
from droidheap.bulk import misses
from droidheap.message_classes import message_classes
from droidheap.trace.frames import PSEUDO_PREFIX, Frame, Mapping, Sample

# ProcessHeapSamples with its samples as bytes (a message's bytes are a length-delimited field's):
# parsed from the dump's own bytes by protobuf's C code, each sample's bytes come without a
# message object, nor a serialization, per sample.
_SAMPLES_FIELD = pb.ProfilePacket.ProcessHeapSamples.DESCRIPTOR.fields_by_name["samples"].number
_SampleBytes = message_classes("droidheap/sample_bytes.proto", "droidheap.trace", [
    ("SampleBytes", [("samples", _SAMPLES_FIELD, "bytes", True)])])["SampleBytes"]
_CALLSTACK_ID = operator.attrgetter("callstack_id")
UNREACHABLE_ROOT = "[droidheap: unreachable]"


MISSING = PSEUDO_PREFIX + ": missing "


def _missing(what: str) -> Mapping:
    """Stands in for an entry the trace refers to but never interned, so no bytes are lost."""
    return Mapping(path=f"{MISSING}{what}]", build_id="")


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


class InternedState:
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

    def samples(self, key: Tuple[int, str],
                src: pb.ProfilePacket.ProcessHeapSamples) -> List[Sample]:
        """The Samples of a dump fragment's HeapSample messages. Its hundreds of thousands are
        looked up by C loops (map) in the dump before, by their bytes; only the samples new since
        are read field by field."""
        serialized = list(_SampleBytes.FromString(src.SerializeToString()).samples)
        samples = src.samples
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
