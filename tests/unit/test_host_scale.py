"""bench/host_scale.py (issue 39's benchmark): it explains itself, and counts a trace's dumps and
call stacks from its packets, without expanding its samples."""
from fixtures_trace import FakeMapping, TraceBuilder

from tests import bench_scripts


def test_the_benchmark_command_loads_and_explains_itself():
    text = bench_scripts.help_text("host_scale.py")
    assert "--seconds" in text and "droidheap's conversion" in text


def test_a_traces_shape_is_counted_from_its_packets(tmp_path):
    b = TraceBuilder().clock_snapshot().process(7, "app").process(8, "other")
    mapping = FakeMapping("/system/lib64/libc.so")
    stacks = [b.callstack([(mapping, pc)]) for pc in (0x10, 0x20, 0x30)]
    b.dump({7: [(stacks[0], 16, 0, 1, 0)], 8: [(stacks[1], 16, 0, 1, 0)]})
    b.dump({7: [(stacks[0], 32, 0, 2, 0), (stacks[2], 16, 0, 1, 0)]})
    trace = tmp_path / "raw-trace"
    trace.write_bytes(b.to_bytes())
    assert bench_scripts.load("host_scale").shape(trace) == (3, 3)
