"""Reading raw traces packet by packet and rebuilding heap dumps from interned state."""
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import encode_bytes_field, parse_trace
from fixtures_trace import (APP, COARSE_NS, LIBC, REALTIME_NS, FakeMapping, TraceBuilder,
                            two_process_trace)


def test_reads_every_packet_of_an_intact_trace():
    data = two_process_trace().to_bytes()
    contents = parse_trace(data)
    assert len(contents.packets) == len(pb.Trace.FromString(data).packet)
    assert contents.intact_length == len(data)
    assert contents.warnings == []


def test_truncated_final_packet_keeps_earlier_packets_and_is_reported():
    data = two_process_trace().to_bytes()
    whole = len(pb.Trace.FromString(data).packet)
    contents = parse_trace(data[:-7])
    assert len(contents.packets) == whole - 1
    assert contents.unframed_bytes > 0
    assert contents.intact_length + contents.unframed_bytes == len(data) - 7
    assert "truncated" in contents.warnings[0]


def test_truncation_inside_a_length_varint_is_reported_not_raised():
    data = two_process_trace().to_bytes()
    cut = parse_trace(data).intact_length
    contents = parse_trace(data + b"\x0a\xff")  # tag of a packet, then half a varint
    assert contents.intact_length == cut and contents.unframed_bytes == 2


def test_undecodable_packet_is_skipped_and_later_packets_kept():
    good = pb.TracePacket(trusted_packet_sequence_id=1).SerializeToString()
    bad = b"\x0a\xff\xff"  # field 1 claims a length far past the payload's end
    data = encode_bytes_field(1, good) + encode_bytes_field(1, bad) + encode_bytes_field(1, good)
    contents = parse_trace(data)
    assert len(contents.packets) == 2
    assert contents.corrupt_packets == 1
    assert "could not be decoded" in contents.warnings[0]


def test_split_dump_is_rebuilt_as_one_dump():
    whole = rebuild_dumps(parse_trace(two_process_trace().to_bytes()).packets)
    split = rebuild_dumps(parse_trace(two_process_trace(fragments=2).to_bytes()).packets)
    for pid in (100, 200):
        assert len(split.dumps[pid]) == 2
        rows = lambda d: sorted((s.self_allocated, s.self_freed, len(s.frames)) for s in d.samples)
        assert rows(split.dumps[pid][0]) == rows(whole.dumps[pid][0])
    assert split.warnings == []


def test_dumps_are_per_process_in_order_with_indices_from_zero():
    dumps = rebuild_dumps(parse_trace(two_process_trace().to_bytes()).packets)
    assert sorted(dumps.dumps) == [100, 200]
    first, second = dumps.dumps[100]
    assert (first.index, second.index) == (0, 1)
    assert first.timestamp < second.timestamp
    assert (first.heap_name, first.sampling_interval_bytes) == ("libc.malloc", 4096)
    assert not first.disconnected and second.disconnected
    assert first.stats.unwinding_errors == 1 and first.stats.heap_samples == 2
    assert dumps.cmdlines == {100: "/data/local/tmp/app --fast", 200: "other"}


def test_a_call_stack_a_later_dump_leaves_out_keeps_its_totals_when_nothing_was_in_use():
    """Android's heapprofd forgets a call stack once nothing allocated there is in use: a later
    dump keeps what the last one said of it, as the trace processor does; one still in use that
    vanished is not made up."""
    builder = TraceBuilder()
    churn = builder.callstack([(APP, 0x10)])
    kept = builder.callstack([(APP, 0x20)])
    other = builder.callstack([(APP, 0x30)])
    builder.dump({7: [(churn, 8192, 8192, 4, 4), (kept, 100, 0, 1, 0), (other, 50, 0, 1, 0)]})
    builder.dump({7: [(kept, 100, 0, 1, 0)]}, timestamp=COARSE_NS + 2 * 10**9)
    first, last = rebuild_dumps(parse_trace(builder.to_bytes()).packets).dumps[7]
    assert [(s.frames[0].rel_pc, s.self_allocated, s.self_freed, s.alloc_count, s.free_count)
            for s in last.samples] == [(0x20, 100, 0, 1, 0), (0x10, 8192, 8192, 4, 4)]


def test_the_call_stacks_listed_are_every_one_a_sample_of_any_dump_names():
    # Listed from the places that changed since the dump before of the same heap: a sample that
    # stayed, moved or came back, and one of another heap, are all there.
    b = TraceBuilder()
    s1, s2, s3, s4 = (b.callstack([(LIBC, 0x1000), (APP, pc)]) for pc in (0x10, 0x20, 0x30, 0x40))
    b.dump({7: [(s1, 64, 0, 1, 0), (s2, 64, 0, 1, 0)], (7, "custom"): [(s4, 8, 0, 1, 0)]})
    b.dump({7: [(s2, 64, 0, 1, 0), (s3, 64, 0, 1, 0)], (7, "custom"): [(s4, 8, 0, 1, 0)]})
    b.dump({7: [(s2, 64, 0, 1, 0), (s1, 128, 0, 2, 0)]})
    dumps = rebuild_dumps(parse_trace(b.to_bytes()).packets)
    named = {id(s.frames): s.frames[-1].rel_pc for d in dumps.dumps[7] for s in d.samples}
    assert sorted(named.values()) == [0x10, 0x20, 0x30, 0x40]
    assert {id(stack) for stack in dumps.call_stacks()} == set(named)


def test_a_dump_without_its_interval_has_the_one_the_traces_config_asked_heapprofd_for():
    """Android 10's heapprofd writes no sampling_interval_bytes: traced's copy of the session's
    config, the trace's first packet, says what it sampled at."""
    b = TraceBuilder().clock_snapshot().process(100, "app")
    config = pb.TracePacket()
    probes = config.trace_config.data_sources.add().config
    probes.name = "linux.process_stats"
    heapprofd = config.trace_config.data_sources.add().config
    heapprofd.name = "android.heapprofd"
    heapprofd.heapprofd_config.sampling_interval_bytes = 8192
    b.packets.insert(0, config)
    stack = b.callstack([(LIBC, 0x1000), (APP, 0x2000)])
    b.dump({100: [(stack, 8192, 0, 1, 0)]}, interval=0)
    dumps = rebuild_dumps(parse_trace(b.to_bytes()).packets)
    assert dumps.dumps[100][0].sampling_interval_bytes == 8192
    # A dump that says its own is taken at its word.
    b.dump({100: [(stack, 8192, 0, 1, 0)]}, interval=4096)
    assert [d.sampling_interval_bytes for d in
            rebuild_dumps(parse_trace(b.to_bytes()).packets).dumps[100]] == [8192, 4096]


def test_interned_entries_persist_across_dumps():
    dumps = rebuild_dumps(parse_trace(two_process_trace().to_bytes()).packets)
    second = dumps.dumps[100][1]
    # s1 and s2 were interned only in the first dump's packet.
    stacks = sorted([f.rel_pc for f in s.frames] for s in second.samples)
    assert stacks == [[0x1000, 0x2000, 0x3000], [0x1000, 0x2000, 0x4000], [0x1000, 0x6000]]


def test_frames_resolve_to_mapping_path_build_id_and_layout():
    dumps = rebuild_dumps(parse_trace(two_process_trace().to_bytes()).packets)
    root, _, leaf = dumps.dumps[100][0].samples[0].frames  # root first, as in the trace
    assert root.mapping.path == "/system/lib64/libc.so"
    assert root.mapping.build_id == LIBC.build_id.hex()
    assert (leaf.mapping.path, leaf.rel_pc) == ("/data/local/tmp/app", 0x3000)
    assert (leaf.mapping.start, leaf.mapping.end) == (APP.start, APP.end)


def test_mapping_path_joins_components_like_trace_processor():
    b = TraceBuilder()
    # One component holding a full path: "/" + "/a/b.so" gives "//a/b.so", reduced to "/a/b.so".
    full = b.callstack([(FakeMapping("/vendor/lib64/x.so", single_component=True), 1),
                        (FakeMapping("/vendor/lib64/y.so"), 2)])
    b.dump({1: [(full, 1, 0, 1, 0)]})
    dumps = rebuild_dumps(parse_trace(b.to_bytes()).packets)
    x, y = dumps.dumps[1][0].samples[0].frames
    assert (x.mapping.path, y.mapping.path) == ("/vendor/lib64/x.so", "/vendor/lib64/y.so")


def test_unknown_path_component_ends_the_path():
    b = TraceBuilder()
    stack = b.callstack([(LIBC, 1)])
    b.dump({1: [(stack, 1, 0, 1, 0)]})
    packets = parse_trace(b.to_bytes()).packets
    packets[0].interned_data.mappings[0].path_string_ids[1] = 99
    assert rebuild_dumps(packets).dumps[1][0].samples[0].frames[0].mapping.path == "/system"


def test_pseudo_mapping_is_recognised_from_its_path():
    dumps = rebuild_dumps(parse_trace(two_process_trace().to_bytes()).packets)
    root, leaf = dumps.dumps[200][0].samples[0].frames
    assert root.mapping.is_pseudo
    assert root.mapping.path == "/[droidheap: unwind error]"  # as the trace processor joins it
    assert root.mapping.display_path == "[droidheap: unwind error]"
    assert not leaf.mapping.is_pseudo


def test_profile_packet_own_tables_are_supported():
    packet = pb.TracePacket(trusted_packet_sequence_id=3, sequence_flags=1)
    profile = packet.profile_packet
    for iid, text in ((1, b"lib"), (2, b"libold.so"), (3, b"\x01\x02\xfe"), (4, b"old_function")):
        profile.strings.add(iid=iid, str=text)
    profile.mappings.add(iid=1, build_id=3, path_string_ids=[1, 2], start=0x1000, end=0x2000)
    profile.frames.add(iid=1, mapping_id=1, rel_pc=0x42, function_name_id=4)
    profile.callstacks.add(iid=1, frame_ids=[1])
    proc = profile.process_dumps.add(pid=7, heap_name="libc.malloc", timestamp=9)
    proc.samples.add(callstack_id=1, self_allocated=100, alloc_count=1)
    # The next dump relies on the tables of the first.
    later = pb.TracePacket(trusted_packet_sequence_id=3)
    later.profile_packet.process_dumps.add(pid=7, timestamp=10).samples.add(
        callstack_id=1, self_allocated=200, alloc_count=2)
    dumps = rebuild_dumps([packet, later])
    for dump in dumps.dumps[7]:
        (frame,) = dump.samples[0].frames
        assert (frame.mapping.path, frame.mapping.build_id) == ("/lib/libold.so", "0102fe")
        assert (frame.rel_pc, frame.function_name) == (0x42, "old_function")
    assert [d.index for d in dumps.dumps[7]] == [0, 1]


def test_cleared_incremental_state_forgets_interned_entries():
    b = two_process_trace()
    packets = parse_trace(b.to_bytes()).packets
    last = packets[-1]
    last.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    dumps = rebuild_dumps(packets)
    second = dumps.dumps[100][1]
    assert all(s.frames[0].mapping.path.startswith("[droidheap: missing") for s in second.samples
               if s.self_allocated != 4096)
    assert any("missing from the trace" in w for w in dumps.warnings)


def test_missing_callstack_keeps_the_bytes_and_warns():
    b = TraceBuilder()
    b.dump({5: [(77, 1234, 0, 1, 0)]})
    dumps = rebuild_dumps(parse_trace(b.to_bytes()).packets)
    (sample,) = dumps.dumps[5][0].samples
    assert sample.self_allocated == 1234 and sample.frames[0].mapping.is_pseudo
    assert "1 samples" in dumps.warnings[0]


def test_dump_without_its_final_fragment_is_kept_with_a_warning():
    b = TraceBuilder()
    stack = b.callstack([(APP, 0x10)])
    b.dump({5: [(stack, 64, 0, 1, 0)]}, finished=False)
    dumps = rebuild_dumps(parse_trace(b.to_bytes()).packets)
    assert dumps.dumps[5][0].samples[0].self_allocated == 64
    assert "cut short" in dumps.warnings[0]


def test_clock_snapshot_dates_dumps_on_the_wall_clock():
    dumps = rebuild_dumps(parse_trace(two_process_trace().to_bytes()).packets)
    first = dumps.dumps[100][0]
    assert dumps.wall_time_ns(first.timestamp) == REALTIME_NS + 10**9


def test_each_dump_is_dated_through_the_last_clock_snapshot_before_it():
    hour = 3600 * 10**9
    b = TraceBuilder().clock_snapshot()
    stack = b.callstack([(APP, 0x10)])
    b.dump({5: [(stack, 64, 0, 1, 0)]}, timestamp=COARSE_NS + 10**9)
    # Meanwhile the wall clock was set an hour forward.
    b.clock_snapshot(coarse=COARSE_NS + 5 * 10**9, realtime=REALTIME_NS + hour + 5 * 10**9)
    b.dump({5: [(stack, 128, 0, 2, 0)]}, timestamp=COARSE_NS + 6 * 10**9)
    dumps = rebuild_dumps(parse_trace(b.to_bytes()).packets)
    first, second = dumps.dumps[5]
    assert dumps.wall_time_ns(first.timestamp) == REALTIME_NS + 10**9
    assert dumps.wall_time_ns(second.timestamp) == REALTIME_NS + hour + 6 * 10**9


def test_dumps_have_no_wall_time_without_a_clock_snapshot():
    b = TraceBuilder()
    b.dump({5: [(b.callstack([(APP, 0x10)]), 64, 0, 1, 0)]})
    dumps = rebuild_dumps(parse_trace(b.to_bytes()).packets)
    assert dumps.wall_time_ns(dumps.dumps[5][0].timestamp) == 0
