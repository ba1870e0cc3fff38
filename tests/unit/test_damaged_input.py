"""Damaged traces and pprof files on the host, mutated at random from real ones (a fixed seed per
run, DROIDHEAP_MUTATIONS of each kind; the closing notes of issue 11 give longer runs): reading
them (report, diff) and converting them (symbolize) ends in results or in one DroidheapError,
never another exception; a trace cut short keeps every dump before the cut and says what it
dropped; a directory with one damaged pprof file keeps the others and names it."""
import gzip
import os
import random

import pytest

from droidheap.convert import convert_trace
from droidheap.errors import DroidheapError
from droidheap.results.load import load_results
from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import iter_fields, parse_trace
from fixtures_trace import two_process_trace
from test_cli_errors import assert_one_line_error, run_cli

MUTATIONS = int(os.environ.get("DROIDHEAP_MUTATIONS", "150"))


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random kind of damage: a cut, flipped bits, a span overwritten, removed or repeated,
    bytes set to the values that make varints and lengths lie."""
    b = bytearray(data)
    at = rng.randrange(len(b))
    span = rng.randrange(1, 64)
    kind = rng.randrange(6)
    if kind == 0:
        del b[at:]
    elif kind == 1:
        for _ in range(rng.randrange(1, 9)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == 2:
        b[at:at + span] = bytes(rng.randrange(256) for _ in range(len(b[at:at + span])))
    elif kind == 3:
        del b[at:at + span]
    elif kind == 4:
        b[at:at] = b[at:at + span]
    else:
        for _ in range(rng.randrange(1, 5)):
            b[rng.randrange(len(b))] = rng.choice((0x00, 0x7f, 0x80, 0xff))
    return bytes(b)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A trace of two processes and what converting it writes: its symbolized trace and pprofs."""
    out = tmp_path_factory.mktemp("converted")
    raw = out / "raw-trace"
    raw.write_bytes(two_process_trace(fragments=2).to_bytes())
    convert_trace(raw, out)
    return out


def survives(read, path) -> bool:
    """Whether `read(path)` gave results; a DroidheapError is the other allowed outcome."""
    try:
        read(path)
        return True
    except DroidheapError as e:
        assert "\n" not in str(e).strip(), e  # one line
        return False


@pytest.mark.parametrize("name", ["raw-trace", "symbolized-trace"])
def test_a_damaged_trace_is_read_or_refused_in_one_line(converted, name, tmp_path):
    data = (converted / name).read_bytes()
    rng = random.Random(f"trace-{name}")
    damaged = tmp_path / "trace"
    read = 0
    for i in range(MUTATIONS):
        damaged.write_bytes(mutate(data, rng))
        read += survives(load_results, damaged)
        out = tmp_path / f"out{i}"
        survives(lambda path: convert_trace(path, out), damaged)
    assert read > MUTATIONS // 4  # most damage leaves something to read


def test_a_damaged_pprof_is_read_or_refused_in_one_line(converted, tmp_path):
    pprofs = sorted(converted.glob("heap_dump.*.pb.gz"))
    rng = random.Random("pprof")
    damaged = tmp_path / "heap_dump.0.1.libc.malloc.pb.gz"
    for _ in range(MUTATIONS):
        raw = gzip.decompress(rng.choice(pprofs).read_bytes())
        # Compressed again, most damage gets past gzip's checksum to the protobuf inside.
        damaged.write_bytes(gzip.compress(mutate(raw, rng)) if rng.random() < 0.8
                            else mutate(gzip.compress(raw), rng))
        survives(load_results, damaged)


def test_a_trace_cut_anywhere_keeps_every_dump_before_the_cut(converted):
    data = (converted / "raw-trace").read_bytes()
    whole = rebuild_dumps(parse_trace(data).packets).dumps
    for cut in range(1, len(data), max(1, len(data) // MUTATIONS)):
        contents = parse_trace(data[:cut])
        dumps = rebuild_dumps(contents.packets)
        lost = sum(len(d) for d in whole.values()) - sum(len(d) for d in dumps.dumps.values())
        for pid, kept in dumps.dumps.items():
            assert [d.samples for d in kept[:-1]] == [d.samples for d in whole[pid][:len(kept) - 1]]
            # The last may have lost its final fragments: what arrived is kept, and said so.
            last, same = kept[-1].samples, whole[pid][len(kept) - 1].samples
            assert last == same[:len(last)], cut
            if last != same:
                assert any("cut short" in w for w in dumps.warnings), (cut, dumps.warnings)
        if lost and contents.intact_length != cut:  # a cut between packets leaves a valid trace
            assert contents.warnings or dumps.warnings, cut


def test_a_directory_with_one_damaged_pprof_keeps_the_others(converted, tmp_path):
    pprofs = sorted(converted.glob("heap_dump.*.pb.gz"))
    for pprof in pprofs:
        (tmp_path / pprof.name).write_bytes(pprof.read_bytes())
    damaged = tmp_path / pprofs[0].name
    damaged.write_bytes(damaged.read_bytes()[:20])
    results = load_results(tmp_path)
    assert len(results.profiles) == len(pprofs) - 1
    assert len(results.warnings) == 1 and str(damaged) in results.warnings[0], results.warnings
    for pprof in pprofs[1:]:
        (tmp_path / pprof.name).write_bytes(b"not a pprof")
    with pytest.raises(DroidheapError):
        load_results(tmp_path)


@pytest.mark.parametrize("name", ["raw-trace", "symbolized-trace"])
def test_report_diff_and_check_of_a_trace_cut_short_warn_naming_it(converted, name, tmp_path):
    cut = tmp_path / name
    cut.write_bytes((converted / name).read_bytes()[:-10])  # into the second dump's packet
    for args in (["report", str(cut)], ["report", str(cut), "--html", str(tmp_path / "r.html")],
                 ["diff", str(cut)], ["check", str(cut), "--max-growth", "1M"]):
        result = run_cli(args, tmp_path)
        assert result.returncode == 0, result.stderr
        warnings = [line for line in (result.stdout + result.stderr).splitlines()
                    if line.startswith("warning: ")]
        assert len(warnings) == 1, (args, result.stdout, result.stderr)
        assert str(cut) in warnings[0] and "cut short or damaged" in warnings[0], warnings
        assert "before it are read" in warnings[0], warnings


def test_a_trace_cut_short_before_its_first_dump_is_an_error(converted, tmp_path):
    data = (converted / "raw-trace").read_bytes()
    first_dump = next(i for i, p in enumerate(parse_trace(data).packets)
                      if p.HasField("profile_packet"))
    before = [end for *_, end in iter_fields(data)][first_dump - 1]  # where that packet starts
    for cut, expected in ((before + 5, "with no whole heap dump before"),
                          (5, "before its first packet ended")):
        damaged = tmp_path / f"cut{cut}"
        damaged.write_bytes(data[:cut])
        for args in (["report", str(damaged)], ["diff", str(damaged)],
                     ["check", str(damaged), "--max-growth", "1M"]):
            result = run_cli(args, tmp_path)
            assert_one_line_error(result, expected)
            assert str(damaged) in result.stderr

