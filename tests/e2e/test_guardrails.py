"""Guardrails: droidheapd's bookkeeping of a session and the trace each have a cap; reaching one
ends the profile cleanly, keeps what was written and says so, and the program goes on."""
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from tests.e2e.trace_check import read_dumps
from tests.trace_processor import LoadedTrace


def test_the_memory_cap_ends_the_profile_that_grew_past_it(cli, alloc_program, tmp_path):
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "-i", "1", "--max-daemon-memory", "100000", "--",
                     alloc_program)
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout  # the program ran to its end
    assert "droidheapd's bookkeeping of the session passed its memory cap (100000 bytes)" \
        in result.stderr, result.stderr
    assert "note: samples were lost (droidheapd's memory cap (--max-daemon-memory) ended the " \
        "profile); its profile ended early" in result.stderr, result.stderr
    # What was booked until then is in the last dump, marked as Perfetto marks it.
    (dumps,) = read_dumps(out / "raw-trace").values()
    assert 0 < sum(sample.self_allocated for _, sample in dumps[-1]) < 28 * 1024 * 1024
    packets = pb.Trace.FromString((out / "raw-trace").read_bytes()).packet
    assert [d.hit_guardrail for p in packets if p.HasField("profile_packet")
            for d in p.profile_packet.process_dumps] == [True]
    # Perfetto's UI shows it among the trace's errors, as it does for heapprofd's guardrails.
    with LoadedTrace(out / "raw-trace") as trace:
        assert [problem[0] for problem in trace.problems()] == ["heapprofd_hit_guardrail"]


def test_the_trace_size_cap_keeps_the_dumps_before_it(cli, alloc_program, tmp_path):
    uncapped = tmp_path / "uncapped"
    result = cli.run("--local", "-o", uncapped, "-i", "1", "-c", "100", "--", alloc_program,
                     "--linger", "1500")
    assert result.returncode == 0, result.stderr
    size = (uncapped / "raw-trace").stat().st_size
    (all_dumps,) = read_dumps(uncapped / "raw-trace").values()
    out = tmp_path / "capped"
    cap = size // 2
    result = cli.run("--local", "-o", out, "-i", "1", "-c", "100", "--max-trace-size", cap, "--",
                     alloc_program, "--linger", "1500")
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout
    assert f"the trace reached its size cap ({cap} bytes)" in result.stderr, result.stderr
    assert (out / "raw-trace").stat().st_size <= cap
    (dumps,) = read_dumps(out / "raw-trace").values()
    assert 1 <= len(dumps) < len(all_dumps)
    assert len(list(out.glob("heap_dump.*.pb.gz"))) == len(dumps)
