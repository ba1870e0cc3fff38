"""The daemon's TraceWriter (ndk_client/daemon/trace_writer.cc), seen through Perfetto's own protos.

The native trace_writer_test writes two traces; here they are replayed packet by packet the way
the trace processor reads them (interned state per sequence, reset by INCREMENTAL_STATE_CLEARED)
and compared with the scenario that executable writes, mirrored below: change both together.
"""
import collections
import dataclasses
import pathlib
import subprocess
from typing import Dict, List

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from tests.trace_processor import LoadedTrace, SiteTotals, sum_totals

CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS_STATE = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
MiB = 1024 * 1024

SECOND = 10**9
T0 = 1000 * SECOND
BIG_STACKS = 50000

# (path, build id, start, end, offset, load bias), as in trace_writer_test.cc.
LIBC_BUILD_ID = bytes.fromhex("00112233445566778899aabbccddeeff8000fe7f")
LIBC = ("/system/lib64/libc.so", LIBC_BUILD_ID, 0x7000000000, 0x7000100000, 0x1000, 0x2000)
LIBC2 = ("/system/lib64/libc.so", LIBC_BUILD_ID, 0x7100000000, 0x7100100000, 0x1000, 0x2000)
LIBA = ("/data/app/com.example.a/base.apk!/lib/arm64-v8a/liba.so", b"", 0x7200000000,
        0x7200040000, 0x5000, 0)
ELF_OFFSETS = {LIBA[2]: 0x4000}  # by start: where the ELF file lies in the mapped file (else 0)
NONAME = ("", b"", 0x7300000000, 0x7300001000, 0, 0)
X = ("/usr/lib/x.so", bytes.fromhex("c0ffee"), 0x5500000000, 0x5500010000, 0x2000, 0)
SCUDO = ("[anon:scudo:primary]", b"", 0x7400000000, 0x7400100000, 0, 0)
BIG = ("/system/bin/big", b"", 0x6000000000, 0x6100000000, 0, 0)
ALL_MAPPINGS = [LIBC, LIBC2, LIBA, NONAME, X, SCUDO, BIG]


def as_read(mapping):
    """A mapping as a reader sees it: a name that is no absolute path gains the leading '/'."""
    path = mapping[0]
    return ("/" + path if path and not path.startswith("/") else path,) + mapping[1:]


def header(pid, timestamp, start, interval, stats, **flags):
    return dict(pid=pid, timestamp=timestamp, start_timestamp=start, heap_name="libc.malloc",
                sampling_interval_bytes=interval, stats=stats,
                from_startup=flags.get("from_startup", False),
                disconnected=flags.get("disconnected", False),
                buffer_overran=flags.get("buffer_overran", False),
                buffer_corrupted=flags.get("buffer_corrupted", False))


def app_a(timestamp, factor):
    deep = tuple((LIBA if i % 2 else LIBC, 0x1000 + 4 * i) for i in range(200))
    stacks = [((LIBC, 0x100), (LIBA, 0x200), (LIBA, 0x300)), ((LIBC, 0x100), (LIBA, 0x210)),
              deep, ((NONAME, 0x10),), ((LIBC, 0x100),)]
    samples = [(stacks[c], (factor * 1000 * (c + 1), factor * 100 * c, factor * (10 + c),
                            factor * c)) for c in range(5)]
    if factor > 1:
        samples.append((((LIBC, 0x100), (LIBA, 0x200), (LIBA, 0x300), (LIBA, 0x400)),
                        (777, 0, 7, 0)))
    return header(101, timestamp, T0, 4096, (1, 2, 3, 4, 5), disconnected=factor > 1), samples


def x_daemon():
    stacks = [((LIBC, 0x100), (X, 0x40)), ((LIBC, 0x100), (SCUDO, 0x8)), ((LIBC2, 0x100),),
              ((LIBC, 0x100),)]
    samples = [(stacks[c], (2000 + c, 0, 1, 0)) for c in (3, 2, 1, 0)]
    return header(202, T0 + SECOND, T0 + SECOND // 2, 8192, (6, 7, 8, 9, 10), from_startup=True,
                  buffer_overran=True, buffer_corrupted=True), samples


def big(pid, stacks, timestamp):
    samples = [(((LIBC, 0x100), (BIG, 4 * i)), (i + 1, i + 1 if i % 2 else 0, 1, i % 2))
               for i in range(stacks)]
    return header(pid, timestamp, timestamp - SECOND // 2, 512, (0, 0, 0, 0, 0)), samples


MAIN_DUMPS = [
    {101: app_a(T0 + SECOND, 1), 202: x_daemon()},
    {101: app_a(T0 + 2 * SECOND, 2)},
    {303: big(303, BIG_STACKS, T0 + 3 * SECOND), 101: app_a(T0 + 3 * SECOND, 2)},
]
RECOVERY_DUMPS = [{1: big(1, 10, T0)}, {2: big(2, 2000, T0 + 2 * SECOND)}]
CMDLINES = {101: ["com.example.a", "--mode", "fast"], 202: ["/usr/bin/x-daemon"], 303: ["big"]}
# What pid 101 exec'd before the last dump.
EXECD = {101: ["/system/bin/app_process64", "com.example.b"]}

TABLES = ("function_names", "build_ids", "mapping_paths", "mappings", "frames", "callstacks")


@dataclasses.dataclass
class Dump:
    packets: List[pb.TracePacket]
    headers: Dict[int, dict]
    samples: Dict[int, list]
    interned: Dict[str, list]  # table -> entries this dump's packets defined


class Replay:
    """One trace read in order, as the trace processor reads it."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        self.packets = list(pb.Trace.FromString(path.read_bytes()).packet)
        packets = self.packets
        self.generations = []  # per CLEARED: table -> entries defined, in order
        self.undefined = []    # descriptions of references to entries not defined before
        self.dumps: List[Dump] = []
        current = None
        for packet in packets:
            if packet.sequence_flags & CLEARED:
                self.generations.append({t: [] for t in TABLES})
            self._intern(packet.interned_data)
            if not packet.HasField("profile_packet"):
                continue
            if current is None:
                current = Dump([], {}, collections.defaultdict(list),
                               {t: [] for t in TABLES})
                self.dumps.append(current)
            current.packets.append(packet)
            for table in TABLES:
                current.interned[table].extend(getattr(packet.interned_data, table))
            for fragment in packet.profile_packet.process_dumps:
                self._add_fragment(current, fragment)
            if not packet.profile_packet.continued:
                current = None

    def _table(self, name):
        return {e.iid: e for e in self.generations[-1][name]} if self.generations else {}

    def _intern(self, data):
        if not self.generations:
            return
        for table in TABLES:
            self.generations[-1][table].extend(getattr(data, table))
        paths, build_ids = self._table("mapping_paths"), self._table("build_ids")
        mappings, frames = self._table("mappings"), self._table("frames")
        for m in data.mappings:
            if m.build_id and m.build_id not in build_ids:
                self.undefined.append(f"build id {m.build_id}")
            self.undefined += [f"path {s}" for s in m.path_string_ids if s not in paths]
        for f in data.frames:
            if f.mapping_id not in mappings:
                self.undefined.append(f"mapping {f.mapping_id}")
        for c in data.callstacks:
            self.undefined += [f"frame {f}" for f in c.frame_ids if f not in frames]

    def mapping(self, iid):
        m = self._table("mappings")[iid]
        paths, build_ids = self._table("mapping_paths"), self._table("build_ids")
        # The trace processor's join: "/" before each component, then "//..." loses one '/'.
        path = "".join("/" + paths[s].str.decode() for s in m.path_string_ids)
        path = path[1:] if path.startswith("//") else path
        build_id = build_ids[m.build_id].str if m.build_id else b""
        return (path, build_id, m.start, m.end, m.exact_offset, m.load_bias)

    def _add_fragment(self, dump, fragment):
        head = header(fragment.pid, fragment.timestamp, fragment.start_timestamp,
                      fragment.sampling_interval_bytes,
                      (fragment.stats.unwinding_errors, fragment.stats.heap_samples,
                       fragment.stats.map_reparses, fragment.stats.total_unwinding_time_us,
                       fragment.stats.client_spinlock_blocked_us),
                      from_startup=fragment.from_startup, disconnected=fragment.disconnected,
                      buffer_overran=fragment.buffer_overran,
                      buffer_corrupted=fragment.buffer_corrupted)
        head["heap_name"] = fragment.heap_name
        assert dump.headers.setdefault(fragment.pid, head) == head, "fragments disagree"
        callstacks, frames = self._table("callstacks"), self._table("frames")
        for s in fragment.samples:
            if s.callstack_id not in callstacks:
                self.undefined.append(f"callstack {s.callstack_id}")
                continue
            stack = tuple((self.mapping(frames[f].mapping_id), frames[f].rel_pc)
                          for f in callstacks[s.callstack_id].frame_ids)
            values = (s.self_allocated, s.self_freed, s.alloc_count, s.free_count)
            dump.samples[fragment.pid].append((stack, values))


@dataclasses.dataclass
class Traces:
    main: Replay
    recovery: Replay


@pytest.fixture(scope="module")
def traces(native_build, tmp_path_factory) -> Traces:
    out = tmp_path_factory.mktemp("trace_writer")
    main, recovery = out / "trace.pftrace", out / "recovery.pftrace"
    result = subprocess.run([str(native_build / "tests" / "trace_writer_test"), str(main),
                             str(recovery)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return Traces(Replay(main), Replay(recovery))


def expected(dumps):
    return [({pid: h for pid, (h, _) in d.items()},
             {pid: [(tuple((as_read(m), pc) for m, pc in stack), v) for stack, v in samples]
              for pid, (_, samples) in d.items()}) for d in dumps]


def test_every_packet_is_on_one_nonzero_sequence(traces):
    for replay in (traces.main, traces.recovery):
        ids = {p.trusted_packet_sequence_id for p in replay.packets}
        assert len(ids) == 1 and 0 not in ids


def clocks_of(packet) -> Dict[int, int]:
    return {c.clock_id: c.timestamp for c in packet.clock_snapshot.clocks}


def test_first_packet_clears_incremental_state_and_snapshots_every_builtin_clock(traces):
    first = traces.main.packets[0]
    assert first.sequence_flags == CLEARED and first.first_packet_on_sequence
    assert first.clock_snapshot.primary_trace_clock == pb.BUILTIN_CLOCK_BOOTTIME
    clocks = clocks_of(first)
    assert set(clocks) == {pb.BUILTIN_CLOCK_BOOTTIME, pb.BUILTIN_CLOCK_MONOTONIC_COARSE,
                           pb.BUILTIN_CLOCK_MONOTONIC, pb.BUILTIN_CLOCK_MONOTONIC_RAW,
                           pb.BUILTIN_CLOCK_REALTIME, pb.BUILTIN_CLOCK_REALTIME_COARSE}
    assert first.timestamp == clocks[pb.BUILTIN_CLOCK_BOOTTIME]


@pytest.mark.parametrize("trace", ["main", "recovery"])
def test_every_dump_follows_a_clock_snapshot_read_at_one_moment(traces, trace):
    replay = getattr(traces, trace)
    for dump in replay.dumps:
        start = replay.packets.index(dump.packets[0])
        last = max(i for i, p in enumerate(replay.packets[:start]) if p.HasField("clock_snapshot"))
        between = replay.packets[last + 1:start]
        assert not any(p.HasField("profile_packet") for p in between)  # fresh, for this dump
        clocks = clocks_of(replay.packets[last])
        ms = 10**6
        # Coarse clocks lag their precise twins by at most a tick; BOOTTIME is MONOTONIC plus the
        # time suspended (read a few nanoseconds earlier).
        assert 0 <= clocks[pb.BUILTIN_CLOCK_MONOTONIC] - clocks[pb.BUILTIN_CLOCK_MONOTONIC_COARSE] \
            < 100 * ms
        assert -100 * ms < clocks[pb.BUILTIN_CLOCK_REALTIME] \
            - clocks[pb.BUILTIN_CLOCK_REALTIME_COARSE] < 100 * ms
        assert clocks[pb.BUILTIN_CLOCK_BOOTTIME] > clocks[pb.BUILTIN_CLOCK_MONOTONIC] - ms
        # Every packet the dump wrote is stamped with that snapshot's BOOTTIME.
        stamped = between + dump.packets
        assert {p.timestamp for p in stamped} == {clocks[pb.BUILTIN_CLOCK_BOOTTIME]}


def test_iid_zero_is_the_empty_string_in_each_string_table(traces):
    data = traces.main.packets[0].interned_data
    for table in (data.function_names, data.build_ids, data.mapping_paths):
        assert [(s.iid, s.str) for s in table] == [(0, b"")]


def test_profile_packets_need_incremental_state_and_only_the_first_packet_clears_it(traces):
    for packet in traces.main.packets[1:]:
        assert not packet.sequence_flags & CLEARED and not packet.first_packet_on_sequence
        if packet.HasField("profile_packet") or packet.HasField("interned_data"):
            assert packet.sequence_flags == NEEDS_STATE


@pytest.mark.parametrize("trace", ["main", "recovery"])
def test_every_referenced_iid_is_defined_earlier_on_the_sequence(traces, trace):
    replay = getattr(traces, trace)
    assert replay.generations and replay.dumps
    assert replay.undefined == []


def test_interned_entries_are_written_once_with_iids_from_one(traces):
    entries = traces.main.generations[0]
    assert len(traces.main.generations) == 1
    for table, defined in entries.items():
        real = [e for e in defined if e.iid != 0]
        assert len({e.iid for e in real}) == len(real), table
        assert not real or min(e.iid for e in real) == 1, table
    for table, key in (("mapping_paths", lambda e: e.str), ("build_ids", lambda e: e.str),
                       ("frames", lambda e: (e.mapping_id, e.rel_pc)),
                       ("callstacks", lambda e: tuple(e.frame_ids)),
                       ("mappings", lambda e: (tuple(e.path_string_ids), e.build_id, e.start,
                                               e.end, e.exact_offset, e.load_bias))):
        keys = [key(e) for e in entries[table] if e.iid != 0]
        assert len(set(keys)) == len(keys), f"{table} has one content under two iids"


def test_dumps_hold_the_snapshots_samples_with_callstacks_root_first(traces):
    got = [(d.headers, dict(d.samples)) for d in traces.main.dumps]
    assert [samples for _, samples in got] == [s for _, s in expected(MAIN_DUMPS)]


def test_dump_headers_carry_timestamps_flags_stats_and_heap_name(traces):
    got = [d.headers for d in traces.main.dumps]
    assert got == [h for h, _ in expected(MAIN_DUMPS)]


def test_mapping_paths_rejoin_to_the_original_paths(traces):
    replay = traces.main
    read = {replay.mapping(m.iid) for m in replay.generations[0]["mappings"]}
    assert read == {as_read(m) for m in ALL_MAPPINGS}
    assert ("/usr/lib/x.so",) == next(r[:1] for r in read if r[2] == X[2])
    assert ("/[anon:scudo:primary]",) == next(r[:1] for r in read if r[2] == SCUDO[2])
    assert ("",) == next(r[:1] for r in read if r[2] == NONAME[2])
    paths = {s.str for s in replay.generations[0]["mapping_paths"] if s.iid}
    assert {b"system", b"lib64", b"libc.so", b"usr", b"lib", b"x.so"} <= paths
    assert not any(p == b"" or (b"/" in p and not p.startswith(b"[")) for p in paths)


def test_build_ids_are_interned_as_raw_bytes_and_unknown_ones_as_zero(traces):
    generation = traces.main.generations[0]
    assert sorted(s.str for s in generation["build_ids"] if s.iid) == sorted(
        [LIBC_BUILD_ID, X[1]])
    without = [m for m in generation["mappings"] if m.start in (LIBA[2], NONAME[2], SCUDO[2])]
    assert len(without) == 3 and all(m.build_id == 0 for m in without)


def test_the_mappings_offset_is_exact_offset_and_the_elf_files_start_offset(traces):
    """As heapprofd's libunwindstack gives them: start_offset is where the ELF file starts (an
    APK's entry), 0 for a file that is one."""
    for m in traces.main.generations[0]["mappings"]:
        original = next(o for o in ALL_MAPPINGS if o[2] == m.start)
        assert (m.exact_offset, m.start_offset) == (original[4], ELF_OFFSETS.get(m.start, 0))


def test_identical_entries_in_two_processes_share_one_iid(traces):
    generation = traces.main.generations[0]
    assert [m.start for m in generation["mappings"]].count(LIBC[2]) == 1
    libc = next(m.iid for m in generation["mappings"] if m.start == LIBC[2])
    assert [(f.mapping_id, f.rel_pc) for f in generation["frames"]].count((libc, 0x100)) == 1
    first = traces.main.dumps[0].packets[0].profile_packet.process_dumps
    by_pid = {d.pid: [s.callstack_id for s in d.samples] for d in first}
    assert by_pid[101][4] == by_pid[202][0]  # both are [libc+0x100]


def test_later_dumps_write_only_entries_new_to_the_sequence(traces):
    second, third = traces.main.dumps[1], traces.main.dumps[2]
    assert {t: len(v) for t, v in second.interned.items() if v} == {"frames": 1, "callstacks": 1}
    assert second.interned["frames"][0].rel_pc == 0x400
    assert [m.start for m in third.interned["mappings"]] == [BIG[2]]
    assert sorted(s.str for s in third.interned["mapping_paths"]) == [b"big", b"bin"]
    assert len(third.interned["frames"]) == len(third.interned["callstacks"]) == BIG_STACKS


def test_callstacks_without_samples_are_not_written(traces):
    assert all(f.rel_pc != 0x999 for f in traces.main.generations[0]["frames"])


def test_large_dump_is_split_into_continued_packets_indexed_from_zero(traces):
    dumps = traces.main.dumps
    indexes = [p.profile_packet.index for d in dumps for p in d.packets]
    assert indexes == list(range(len(indexes)))
    assert len(dumps[2].packets) >= 3
    for dump in dumps:
        assert [p.profile_packet.continued for p in dump.packets] == (
            [True] * (len(dump.packets) - 1) + [False])
    assert all(p.ByteSize() < MiB for p in traces.main.packets)


def test_each_process_is_described_before_its_first_samples_and_again_after_an_exec(traces):
    packets = traces.main.packets
    described = collections.defaultdict(list)  # pid: [(packet index, cmdline)]
    for i, packet in enumerate(packets):
        for process in packet.process_tree.processes:
            described[process.pid].append((i, list(process.cmdline)))
    assert {pid: [cmdline for _, cmdline in d] for pid, d in described.items()} == {
        pid: [cmdline, *([EXECD[pid]] if pid in EXECD else [])]
        for pid, cmdline in CMDLINES.items()}
    for i, packet in enumerate(packets):
        for fragment in packet.profile_packet.process_dumps:
            assert described[fragment.pid][0][0] < i
    # Described again in the dump that first holds the new program's samples.
    (exec_described, _), = described[101][1:]
    assert exec_described > packets.index(traces.main.dumps[1].packets[-1])


@pytest.mark.parametrize("trace", ["main", "recovery"])
def test_packet_timestamps_never_decrease_along_the_file(traces, trace):
    # The trace processor sorts packets by timestamp before it reads dumps and their indexes.
    stamps = [p.timestamp for p in getattr(traces, trace).packets]
    assert all(stamps) and stamps == sorted(stamps)


def test_a_failed_dump_leaves_no_bytes_and_the_next_one_restarts_the_sequence(traces):
    replay = traces.recovery
    cleared = [i for i, p in enumerate(replay.packets) if p.sequence_flags & CLEARED]
    assert len(cleared) == 2 and cleared[0] == 0
    first_dump_end = replay.packets.index(replay.dumps[0].packets[-1])
    assert first_dump_end < cleared[1] < replay.packets.index(replay.dumps[1].packets[0])
    assert replay.packets[cleared[1]].HasField("clock_snapshot")
    assert not replay.packets[cleared[1]].first_packet_on_sequence
    # The trace processor counts ProfilePacket indexes from 0 in each incremental-state generation,
    # and each of these dumps starts one.
    for dump in replay.dumps:
        indexes = [p.profile_packet.index for p in dump.packets]
        assert indexes == list(range(len(indexes)))
    assert [p.pid for packet in replay.packets for p in packet.process_tree.processes] == [1, 2]
    got = [(d.headers, dict(d.samples)) for d in replay.dumps]
    assert got == expected(RECOVERY_DUMPS)


def last_dump_totals(dumps) -> Dict[int, SiteTotals]:
    totals = {}
    for dump in dumps:
        for pid, (_, samples) in dump.items():
            totals[pid] = SiteTotals(*(sum(v[i] for _, v in samples) for i in range(4)))
    return totals


@pytest.mark.parametrize("trace, dumps, names, problems", [
    # The scenario's pid 202 reports a corrupted buffer and an overrun: the trace processor counts
    # both, and nothing else.
    ("main", MAIN_DUMPS, {pid: cmdline[0] for pid, cmdline in {**CMDLINES, **EXECD}.items()},
     [("heapprofd_buffer_corrupted", 202, "error", 1),
      ("heapprofd_buffer_overran", 202, "data_loss", 1)]),
    ("recovery", RECOVERY_DUMPS, {1: "big", 2: "big"}, []),
])
def test_trace_processor_books_every_process_last_dump(traces, trace, dumps, names, problems):
    with LoadedTrace(getattr(traces, trace).path) as loaded:
        assert sorted(loaded.problems()) == problems
        assert loaded.process_names() == names
        booked = {pid: sum_totals(sites.values())
                  for pid, sites in loaded.totals_by_site("").items()}
    assert booked == last_dump_totals(dumps)
