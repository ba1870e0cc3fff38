"""Test helpers: synthetic heapprofd-style traces built with perfetto_trace_pb2, and a tiny C
program compiled with debug info whose real return addresses the symbolizer tests use."""
import dataclasses
import pathlib
import re
import shutil
import subprocess
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

SEQ_ID = 42
# One moment on three clocks (as a clock snapshot reads them); dumps are stamped on
# MONOTONIC_COARSE, as heapprofd's are.
BOOTTIME_NS = 7_000_000_000
COARSE_NS = 5_000_000_000
REALTIME_NS = 1_700_000_000_000_000_000


@dataclasses.dataclass(frozen=True)
class FakeMapping:
    path: str  # split into components like the daemon does
    build_id: bytes = b""
    start: int = 0x7000_0000
    end: int = 0x7001_0000
    offset: int = 0  # start_offset: the mapping's, or (with exact_offset) the ELF file's
    load_bias: int = 0
    exact_offset: Optional[int] = None  # the mapping's offset, as droidheapd and Android 11 give it
    # Intern the path as one component (as Chrome does) instead of one per directory.
    single_component: bool = False


# (callstack iid, self_allocated, self_freed, alloc_count, free_count)
SampleRow = Tuple[int, int, int, int, int]
# A dump's samples are keyed by pid (of the dump's `heap`) or by (pid, heap name).
DumpKey = Union[int, Tuple[int, str]]


def heap_counters(alloc_count: int, alloc_bytes: int, free_count: int, free_bytes: int,
                  heap: str = "libc.malloc") -> Dict[str, int]:
    """The exact totals of a heap, named as droidheapd names its counter tracks."""
    return {f"{heap}: allocations": alloc_count, f"{heap}: allocated bytes": alloc_bytes,
            f"{heap}: frees": free_count, f"{heap}: freed bytes": free_bytes}


def mallinfo_counters(in_use: int, free: int, system: int) -> Dict[str, int]:
    return {"mallinfo: in use bytes": in_use, "mallinfo: free bytes": free,
            "mallinfo: system bytes": system}


class TraceBuilder:
    """Writes packets the way droidheapd does: one sequence, the first packet clearing incremental
    state, entries interned once (in the next packet written) and referred to by every later
    dump, counter tracks described once per sequence."""

    def __init__(self, seq_id: int = SEQ_ID):
        self.seq_id = seq_id
        self.packets: List[pb.TracePacket] = []
        # (pid, counter name) -> track uuid; (pid, "") is the process track. Kept over a restart,
        # as droidheapd derives them from the pid.
        self._track_uuids: Dict[Tuple[int, str], int] = {}
        self._start_sequence()

    def _start_sequence(self) -> None:
        self._clear_next = True
        # The trace processor counts ProfilePacket indexes from 0 in each incremental-state
        # generation.
        self._profile_packets = 0
        self._pending = pb.InternedData()
        self._strings: Dict[str, int] = {}
        self._build_ids: Dict[bytes, int] = {}
        self._mappings: Dict[FakeMapping, int] = {}
        self._frames: Dict[Tuple[int, int], int] = {}
        self._callstacks: Dict[Tuple[int, ...], int] = {}
        self._described_tracks: Set[int] = set()

    def restart(self):
        """Starts the sequence again, as droidheapd does after a failed dump: the next packet
        clears incremental state; entries are interned and counter tracks described anew."""
        self._start_sequence()
        return self

    def _packet(self) -> pb.TracePacket:
        packet = pb.TracePacket(trusted_packet_sequence_id=self.seq_id)
        if self._clear_next:
            packet.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            self._clear_next = False
        self.packets.append(packet)
        return packet

    def clock_snapshot(self, boottime: int = BOOTTIME_NS, coarse: int = COARSE_NS,
                       realtime: int = REALTIME_NS):
        packet = self._packet()
        for clock, timestamp in ((pb.BUILTIN_CLOCK_BOOTTIME, boottime),
                                 (pb.BUILTIN_CLOCK_MONOTONIC_COARSE, coarse),
                                 (pb.BUILTIN_CLOCK_REALTIME, realtime)):
            packet.clock_snapshot.clocks.add(clock_id=clock, timestamp=timestamp)
        return self

    def process(self, pid: int, *cmdline: str):
        self._packet().process_tree.processes.add(pid=pid, ppid=1, cmdline=list(cmdline))
        return self

    def process_stats(self, pid: int, rss_kb: int, rss_anon_kb: int = 0):
        self._packet().process_stats.processes.add(pid=pid, vm_rss_kb=rss_kb,
                                                   rss_anon_kb=rss_anon_kb)
        return self

    def _track_uuid(self, pid: int, name: str = "") -> int:
        """The uuid of `pid`'s counter track `name` (its process track for ""), described first
        (after its parent) when the sequence has not had it."""
        parent = self._track_uuid(pid) if name else 0
        uuid = self._track_uuids.setdefault((pid, name), len(self._track_uuids) + 1)
        if uuid not in self._described_tracks:
            self._described_tracks.add(uuid)
            track = self._packet().track_descriptor
            track.uuid = uuid
            if name:
                track.parent_uuid = parent
                track.name = name
                in_bytes = name.endswith(" bytes")
                track.counter.unit = (pb.CounterDescriptor.UNIT_SIZE_BYTES if in_bytes
                                      else pb.CounterDescriptor.UNIT_COUNT)
            else:
                track.process.pid = pid
        return uuid

    def counters(self, pid: int, values: Dict[str, int], timestamp: int = BOOTTIME_NS + 10**9):
        """`pid`'s counter values for the next dump, one packet each, after the descriptors of
        the tracks new to the sequence (the process track first)."""
        uuids = {name: self._track_uuid(pid, name) for name in values}
        for name, value in values.items():
            packet = self._packet()
            packet.timestamp = timestamp
            event = packet.track_event
            event.type = pb.TrackEvent.TYPE_COUNTER
            event.track_uuid = uuids[name]
            event.counter_value = value
        return self

    def ending(self, pid: int, name: str, timestamp: int = BOOTTIME_NS + 10**9):
        """How `pid`'s profile ended ("process exited", ...), said before its last dump, as
        droidheapd says it: an instant event on the process track."""
        uuid = self._track_uuid(pid)
        packet = self._packet()
        packet.timestamp = timestamp
        packet.track_event.type = pb.TrackEvent.TYPE_INSTANT
        packet.track_event.track_uuid = uuid
        packet.track_event.name = name
        return self

    def _path_id(self, component: str) -> int:
        if component not in self._strings:
            self._strings[component] = len(self._strings) + 1
            self._pending.mapping_paths.add(iid=self._strings[component], str=component.encode())
        return self._strings[component]

    def _mapping_id(self, m: FakeMapping) -> int:
        if m not in self._mappings:
            build_iid = 0
            if m.build_id:
                if m.build_id not in self._build_ids:
                    self._build_ids[m.build_id] = len(self._build_ids) + 1
                    self._pending.build_ids.add(iid=self._build_ids[m.build_id], str=m.build_id)
                build_iid = self._build_ids[m.build_id]
            split = m.path.startswith("/") and not m.single_component
            components = [c for c in m.path.split("/") if c] if split else [m.path]
            self._mappings[m] = len(self._mappings) + 1
            added = self._pending.mappings.add(
                iid=self._mappings[m], build_id=build_iid, start_offset=m.offset, start=m.start,
                end=m.end, load_bias=m.load_bias,
                path_string_ids=[self._path_id(c) for c in components])
            if m.exact_offset is not None:
                added.exact_offset = m.exact_offset
        return self._mappings[m]

    def callstack(self, frames: Sequence[Tuple[FakeMapping, int]]) -> int:
        """Interns a call stack given root first as (mapping, rel_pc); returns its iid."""
        frame_ids = []
        for mapping, rel_pc in frames:
            key = (self._mapping_id(mapping), rel_pc)
            if key not in self._frames:
                self._frames[key] = len(self._frames) + 1
                self._pending.frames.add(iid=self._frames[key], mapping_id=key[0], rel_pc=rel_pc)
            frame_ids.append(self._frames[key])
        key = tuple(frame_ids)
        if key not in self._callstacks:
            self._callstacks[key] = len(self._callstacks) + 1
            self._pending.callstacks.add(iid=self._callstacks[key], frame_ids=frame_ids)
        return self._callstacks[key]

    def dump(self, samples: Dict[DumpKey, List[SampleRow]], timestamp: int = COARSE_NS + 10**9,
             heap: str = "libc.malloc", interval: int = 4096, fragments: int = 1,
             finished: bool = True, **flags):
        """One dump of every pid (or (pid, heap)) in `samples`, one ProcessHeapSamples each in
        that order, split over `fragments` packets (samples dealt out round robin);
        `finished=False` leaves `continued` set on the last one."""
        for index in range(fragments):
            packet = self._packet()
            if index == 0 and self._pending.ByteSize():
                packet.interned_data.CopyFrom(self._pending)
                self._pending = pb.InternedData()
            profile = packet.profile_packet
            profile.index = self._profile_packets
            self._profile_packets += 1
            profile.continued = index < fragments - 1 or not finished
            for key, rows in samples.items():
                pid, heap_name = key if isinstance(key, tuple) else (key, heap)
                proc = profile.process_dumps.add(
                    pid=pid, heap_name=heap_name, sampling_interval_bytes=interval,
                    timestamp=timestamp, start_timestamp=COARSE_NS, **flags)
                proc.stats.unwinding_errors = 1
                proc.stats.heap_samples = len(rows)
                for row in rows[index::fragments]:
                    proc.samples.add(callstack_id=row[0], self_allocated=row[1],
                                     self_freed=row[2], alloc_count=row[3], free_count=row[4])
        return self

    def to_bytes(self) -> bytes:
        return pb.Trace(packet=self.packets).SerializeToString()


LIBC = FakeMapping("/system/lib64/libc.so",
                   bytes.fromhex("00ff11ee22dd33cc44bb55aa6699778800ff11ee"))
APP = FakeMapping("/data/local/tmp/app", bytes.fromhex("abcdef0123456789abcdef0123456789ff000001"),
                  start=0x5500_0000, end=0x5502_0000)
UNWIND_ERROR = FakeMapping("[droidheap: unwind error]", start=0, end=0)


def two_process_trace(fragments: int = 1) -> TraceBuilder:
    """Two processes, two dumps each; the second dump reuses the first's interned stacks and adds
    one, and the first dump may be split over several packets."""
    b = TraceBuilder().clock_snapshot().process(100, "/data/local/tmp/app", "--fast")
    b.process(200, "other")
    s1 = b.callstack([(LIBC, 0x1000), (APP, 0x2000), (APP, 0x3000)])
    s2 = b.callstack([(LIBC, 0x1000), (APP, 0x2000), (APP, 0x4000)])
    s3 = b.callstack([(UNWIND_ERROR, 2), (APP, 0x5000)])
    b.dump({100: [(s1, 8192, 4096, 2, 1), (s2, 40960, 0, 10, 0)], 200: [(s3, 4096, 0, 1, 0)]},
           fragments=fragments)
    s4 = b.callstack([(LIBC, 0x1000), (APP, 0x6000)])
    b.dump({100: [(s1, 16384, 16384, 4, 4), (s2, 81920, 4096, 20, 1), (s4, 4096, 0, 1, 0)],
            200: [(s3, 8192, 0, 2, 0)]}, timestamp=COARSE_NS + 2 * 10**9, disconnected=True)
    return b


# ---- a real program to symbolize ----

PROGRAM = """\
#include <stdlib.h>

void *volatile sink;

__attribute__((noinline)) void *leaf_alloc(size_t n) {
  void *p = malloc(n); /* LEAF_MALLOC */
  sink = p;
  return p;
}

__attribute__((noinline)) void *middle(size_t n) {
  void *p = leaf_alloc(n); /* CALL_LEAF */
  sink = 0;                /* AFTER_CALL */
  return p;
}

int main(int argc, char **argv) {
  (void)argv;
  free(middle((size_t)argc * 16)); /* CALL_MIDDLE */
  return 0;
}
"""


@dataclasses.dataclass
class CompiledProgram:
    path: pathlib.Path
    source: pathlib.Path
    build_id: str
    functions: Dict[str, int]      # symbol -> address
    return_addresses: Dict[str, int]  # callee -> address after the call to it
    lines: Dict[str, int]          # marker comment -> line number

    def line_of(self, marker: str) -> int:
        return self.lines[marker]


def compile_program(out_dir: pathlib.Path, compiler: str = "gcc", objdump: str = "objdump",
                    flags: Sequence[str] = ()) -> Optional[CompiledProgram]:
    """Builds PROGRAM with -g -O1 -fno-omit-frame-pointer and `flags`; None when the toolchain
    is absent."""
    if shutil.which(compiler) is None or shutil.which(objdump) is None:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    source = out_dir / "alloc_prog.c"
    source.write_text(PROGRAM)
    binary = out_dir / "alloc_prog"
    subprocess.run([compiler, "-g", "-O1", "-fno-omit-frame-pointer", "-Wl,--build-id", *flags,
                    str(source), "-o", str(binary)], check=True, capture_output=True)
    disassembly = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(binary)], check=True,
                                 capture_output=True, text=True).stdout
    functions, return_addresses = {}, {}
    calls_pending: List[str] = []
    for line in disassembly.splitlines():
        header = re.match(r"^([0-9a-f]+) <([^>]+)>:", line)
        if header:
            functions[header.group(2)] = int(header.group(1), 16)
            continue
        insn = re.match(r"^\s+([0-9a-f]+):\s+(\S+)(.*)$", line)
        if not insn:
            continue
        address = int(insn.group(1), 16)
        for callee in calls_pending:  # the instruction after a call: its return address
            return_addresses.setdefault(callee, address)
        calls_pending = []
        call = re.search(r"<([A-Za-z_]\w*)(@plt)?>", insn.group(3))
        if insn.group(2) in ("call", "bl", "callq") and call:
            calls_pending.append(call.group(1))
    lines = {}
    for number, text in enumerate(PROGRAM.splitlines(), start=1):
        marker = re.search(r"/\* (\w+) \*/", text)
        if marker:
            lines[marker.group(1)] = number
    note = subprocess.run(["readelf", "-n", str(binary)], capture_output=True, text=True).stdout
    build_id = re.search(r"Build ID: ([0-9a-f]+)", note).group(1)
    return CompiledProgram(binary, source, build_id, functions, return_addresses, lines)
