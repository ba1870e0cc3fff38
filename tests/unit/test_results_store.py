"""droidheap-results.json.gz (results/store.py): a conversion stores its profiles, and `report`,
`diff` and `check` of the output directory read them without parsing the trace; a trace newer
than the file, or a file of another version, is read instead; a damaged, inflated or ill-typed
file is one DroidheapError; what each dump's sweep for unreachable memory found is kept, told
against the sweep before. And a trace of many thousand call stacks converts within a memory cap
(issue 39)."""
import gzip
import json
import os
import random
import resource
import subprocess
import sys

import pytest

from droidheap.convert import convert_trace
from droidheap.errors import DroidheapError
from droidheap.results import load
from droidheap.results.load import SYMBOLIZED_TRACE, load_results
from droidheap.results.report import build_report, report_json
from droidheap.results.model import Location, Profile, Results, StackSample, Unreachable
from droidheap.results.sites import CallStack
from droidheap.results.store import RESULTS_FILE, read_results, write_results
from droidheap.trace import reader
from fixtures_trace import APP, COARSE_NS, LIBC, TraceBuilder, two_process_trace
from test_damaged_input import mutate, survives

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def converted(tmp_path):
    raw = tmp_path / "raw-trace"
    raw.write_bytes(two_process_trace().to_bytes())
    convert_trace(raw, tmp_path / "out")
    return tmp_path / "out"


def _report(results):
    data = report_json(build_report(results.profiles, results.warnings))
    for profile in data["profiles"]:
        profile.pop("source")
    return data


def test_reports_of_an_output_read_what_the_conversion_stored_not_the_trace(converted,
                                                                            monkeypatch):
    from_trace = load_results(converted / SYMBOLIZED_TRACE)

    def no_parsing(data):
        raise AssertionError("the trace was parsed again")
    monkeypatch.setattr(reader, "parse_trace", no_parsing)
    stored = load_results(converted)
    assert stored.profiles[0].source == str(converted / RESULTS_FILE)
    assert _report(stored) == _report(from_trace)
    assert [p.samples for p in stored.profiles] == [p.samples for p in from_trace.profiles]
    # Each call stack is one object, shared by every dump that has it.
    stacks = {id(s.stack) for p in stored.profiles for s in p.samples}
    assert len(stacks) == len({s.stack for p in stored.profiles for s in p.samples})


def test_a_sample_nothing_happened_at_between_dumps_is_stored_and_read_once(tmp_path):
    _two_dumps_one_sample_changed(tmp_path)


def _two_dumps_one_sample_changed(tmp_path):
    b = TraceBuilder().clock_snapshot().process(7, "app")
    quiet, busy = (b.callstack([(LIBC, 0x1000), (APP, pc)]) for pc in (0x2000, 0x3000))
    b.dump({7: [(quiet, 4096, 0, 1, 0), (busy, 4096, 0, 1, 0)]})
    b.dump({7: [(quiet, 4096, 0, 1, 0), (busy, 8192, 0, 2, 0)]}, timestamp=COARSE_NS + 2 * 10**9)
    raw = tmp_path / "raw-trace"
    raw.write_bytes(b.to_bytes())
    convert_trace(raw, tmp_path / "out")
    first, second = (p.samples for p in read_results(tmp_path / "out" / RESULTS_FILE).profiles)
    assert first[0] is second[0] and first[1] != second[1]
    stored = json.loads(gzip.decompress((tmp_path / "out" / RESULTS_FILE).read_bytes()))
    assert len(stored["samples"]) == 3 * 5  # three distinct samples of five fields
    # The second dump is the first's samples but at the place that changed.
    assert {k: stored["profiles"][1][k] for k in ("base", "length", "at")} == {
        "base": 0, "length": 2, "at": [1]}
    return tmp_path / "out" / RESULTS_FILE


def test_a_sample_that_moved_place_between_dumps_is_still_stored_once(tmp_path):
    # Dumps are compared place by place (as a rule the daemon keeps its stacks in order); a
    # sample at another place than before is found again all the same.
    b = TraceBuilder().clock_snapshot().process(7, "app")
    quiet, busy = (b.callstack([(LIBC, 0x1000), (APP, pc)]) for pc in (0x2000, 0x3000))
    b.dump({7: [(quiet, 4096, 0, 1, 0), (busy, 4096, 0, 1, 0)]})
    b.dump({7: [(busy, 4096, 0, 1, 0), (quiet, 4096, 0, 1, 0)]}, timestamp=COARSE_NS + 2 * 10**9)
    raw = tmp_path / "raw-trace"
    raw.write_bytes(b.to_bytes())
    convert_trace(raw, tmp_path / "out")
    first, second = (p.samples for p in read_results(tmp_path / "out" / RESULTS_FILE).profiles)
    assert first[0] is second[1] and first[1] is second[0]
    stored = json.loads(gzip.decompress((tmp_path / "out" / RESULTS_FILE).read_bytes()))
    assert len(stored["samples"]) == 2 * 5


@pytest.mark.parametrize("change, message", [
    ({"base": 1}, "a profile's base is not a profile before it"),
    ({"base": -1}, "a profile's base is not a profile before it"),
    ({"at": [2]}, "a profile's changes are not places in it"),
    ({"at": [0, 1]}, "a profile's changes are not places in it"),
    ({"length": 3}, "a profile has places nothing fills"),
    ({"base": "0"}, "a base is not a int"),
])
def test_a_dump_told_by_its_changes_is_refused_when_they_do_not_fit(tmp_path, change, message):
    path = _two_dumps_one_sample_changed(tmp_path)
    data = json.loads(gzip.decompress(path.read_bytes()))
    data["profiles"][1].update(change)
    _write(path, data)
    with pytest.raises(DroidheapError, match="is damaged") as error:
        read_results(path)
    assert message in str(error.value)


def test_reading_stored_results_loads_no_trace_reader(converted):
    # Neither protobuf's Perfetto messages nor pyelftools: a report starts in a tenth of a second.
    check = ("import sys; from droidheap.results.load import load_results; "
             f"load_results({str(converted)!r}); "
             "print(sorted(m for m in sys.modules if m.startswith(('droidheap.trace.reader', "
             "'droidheap.symbolizer', 'perfetto', 'elftools'))))")
    loaded = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True,
                            text=True, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout


def test_a_trace_newer_than_the_stored_results_is_read_instead(converted, monkeypatch):
    stored = (converted / RESULTS_FILE).stat().st_mtime_ns
    os.utime(converted / SYMBOLIZED_TRACE, ns=(stored + 10**9, stored + 10**9))
    read = []
    monkeypatch.setattr(load, "read_results", lambda path: read.append(path))
    assert load_results(converted).profiles[0].source == str(converted / SYMBOLIZED_TRACE)
    assert read == []


def test_results_of_another_version_are_left_for_the_trace(converted):
    path = converted / RESULTS_FILE
    data = json.loads(gzip.decompress(path.read_bytes()))
    path.write_bytes(gzip.compress(json.dumps({**data, "version": 99}).encode()))
    assert read_results(path) is None
    assert load_results(converted).profiles[0].source == str(converted / SYMBOLIZED_TRACE)


def _write(path, data):
    path.write_bytes(gzip.compress(json.dumps(data).encode()))


@pytest.mark.parametrize("change, message", [
    (lambda d: d["stacks"].append([10**6]), "a stack names a location that is not in the file"),
    (lambda d: d["samples"].extend([10**6, 1, 1, 1, 1]),
     "a sample names a stack that is not in the file"),
    (lambda d: d["samples"].append(1), "the samples are cut short"),
    (lambda d: d["profiles"][0]["samples"].append(10**6),
     "a profile names a sample that is not in the file"),
    (lambda d: d["profiles"][0]["samples"].append(-1),
     "a profile names a sample that is not in the file"),
    (lambda d: d["profiles"][0].update(pid="7"), "pid is not a int"),
    (lambda d: d["profiles"][0].update(at_peak=1), "at_peak is not a bool"),
    (lambda d: d["locations"].append(["f", "file", True, "m"]), "a line is not a int"),
    (lambda d: d["locations"].append([["f"], "", 0, ""]), "a function is not a str"),
    (lambda d: d["profiles"][0].pop("heap"), "'heap'"),
    (lambda d: d.update(format="something else"), "it is not droidheap's results"),
])
def test_an_ill_formed_file_is_refused_in_one_line(converted, change, message):
    path = converted / RESULTS_FILE
    data = json.loads(gzip.decompress(path.read_bytes()))
    change(data)
    _write(path, data)
    with pytest.raises(DroidheapError, match="is damaged") as error:
        read_results(path)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_file_that_inflates_past_any_honest_ratio_is_refused(converted):
    path = converted / RESULTS_FILE
    path.write_bytes(gzip.compress(b" " * (300 << 20)))  # 300 MiB of JSON whitespace, ~300 KB
    with pytest.raises(DroidheapError, match="inflates to more than 32 times its size"):
        read_results(path)


def test_a_file_of_nothing_but_lists_is_refused(converted):
    """Lists of a digit each, a million: well within the ratio (they compress ~10 times), and
    60 bytes a list once parsed (30 million would cost 4 GB)."""
    path = converted / RESULTS_FILE
    rng = random.Random("lists")
    lists = ",".join(f"[{rng.randrange(10)}]" for _ in range(1 << 20))
    path.write_bytes(gzip.compress(f"[{lists}]".encode()))
    with pytest.raises(DroidheapError, match="more lists than its size could honestly hold"):
        read_results(path)


def test_dumps_that_repeat_another_past_what_the_file_could_hold_are_refused(tmp_path):
    """A dump stored as "the same as dump 0" is ~250 bytes however many samples it names again:
    a few KB of gzip could claim 2**26 of them, half a GiB once read, whatever the file's size.
    Here 120 repeats of 100,000 samples (97 MB) from 1 KB: 39 per byte of its JSON, past 32."""
    path = _two_dumps_one_sample_changed(tmp_path)
    data = json.loads(gzip.decompress(path.read_bytes()))
    first = dict(data["profiles"][0], samples=[0] * 100_000)
    data["profiles"] = [first] + [dict(first, base=0, length=100_000, at=[], samples=[])] * 120
    _write(path, data)
    assert path.stat().st_size < 2_000
    with pytest.raises(DroidheapError) as error:
        read_results(path)
    assert str(error.value) == (f"{path} is damaged: its dumps hold more samples than its size "
                                "could honestly hold")


def test_an_idle_process_dumped_many_times_unchanged_is_read(tmp_path):
    """The most samples per byte droidheap writes: dumps nothing happened in between, each
    stored as its base and no changes (here 3,000 dumps of 2,000 call stacks: 6.5 per byte of
    JSON; an idle process of 10,000 stacks dumped every second for an hour makes 13)."""
    rng = random.Random("idle")
    frames = [Location(f"f{i}", "a.cc", i, "/system/lib64/libc.so") for i in range(500)]
    samples = [StackSample(CallStack(rng.choices(frames, k=8)), 1, 64, 1, 64)
               for _ in range(2000)]
    profiles = [Profile(pid=7, cmdline="app", heap="libc.malloc", dump_index=i,
                        timestamp_ns=i * 10**9, sampling_interval_bytes=4096, samples=samples)
                for i in range(3000)]
    path = tmp_path / RESULTS_FILE
    write_results(Results(profiles, []), path)
    assert len(gzip.decompress(path.read_bytes())) * 6 < 3000 * 2000
    first, *rest = read_results(path).profiles
    assert first.samples == samples and len(rest) == 2999
    # The same StackSamples: compared by identity, in a tenth of a second.
    assert all(map(list.__eq__, (p.samples for p in rest), [first.samples] * 2999))


def test_a_damaged_file_is_read_or_refused_in_one_line(converted):
    path = converted / RESULTS_FILE
    whole = path.read_bytes()
    text = gzip.decompress(whole)
    rng = random.Random("results")
    for _ in range(150):
        # Compressed again, most damage gets past gzip's checksum to the JSON inside.
        path.write_bytes(gzip.compress(mutate(text, rng)) if rng.random() < 0.8
                         else mutate(whole, rng))
        survives(read_results, path)


def test_a_trace_with_sweeps_reports_the_same_from_what_its_conversion_stored(tmp_path):
    from test_unreachable_trace import _two_dumps
    raw = tmp_path / "raw-trace"
    raw.write_bytes(_two_dumps().to_bytes())
    convert_trace(raw, tmp_path / "out")
    stored, from_trace = load_results(tmp_path / "out"), load_results(raw)
    assert stored.profiles[0].source.endswith(RESULTS_FILE)
    assert [p.unreachable for p in stored.profiles] == [p.unreachable for p in from_trace.profiles]
    assert _report(stored) == _report(from_trace)
    assert _report(stored)["profiles"][0]["unreachable"]["estimated_bytes"] == 32


def _swept_dumps():
    """Four dumps of one process: no sweep, a sweep, the same blocks and one more unreachable,
    then no sweep with why."""
    frames = [Location(f"f{i}", "a.cc", i, "/data/app") for i in range(4)]
    heap = [StackSample(CallStack(frames[i:i + 2]), 2, 128, 1, 64) for i in range(3)]
    lost = [StackSample(heap[i].stack, 0, 0, 1, 64) for i in range(3)]
    sweeps = [None, Unreachable(lost[:2], complete=True, blocks_swept=9, blocks=2, bytes=128,
                                held_ns=500_000),
              Unreachable(lost, complete=True, blocks_swept=9, blocks=3, bytes=192, held_ns=400,
                          listed_blocks=12, note="1 mapping not read"),
              Unreachable([], swept=False, note="the process had exited")]
    return [Profile(pid=7, cmdline="app", heap="libc.malloc", dump_index=i, timestamp_ns=i,
                    sampling_interval_bytes=1, samples=heap, unreachable=sweep)
            for i, sweep in enumerate(sweeps)]


def test_each_sweep_is_kept_and_one_like_the_sweep_before_is_stored_as_its_changes(tmp_path):
    path = tmp_path / RESULTS_FILE
    written = _swept_dumps()
    write_results(Results(written, []), path)
    stored = json.loads(gzip.decompress(path.read_bytes()))
    assert len(stored["samples"]) == 6 * 5  # the heap's three and the sweep's three, once each
    assert [p["unreachable"] and {k: p["unreachable"].get(k) for k in ("base", "at", "samples")}
            for p in stored["profiles"]] == [
        None, {"base": None, "at": None, "samples": [3, 4]},
        {"base": 1, "at": [2], "samples": [5]}, {"base": 2, "at": [], "samples": []}]
    read = read_results(path).profiles
    assert [p.unreachable for p in read] == [p.unreachable for p in written]
    # The sweeps' samples on the heap's stacks, shared as the file read them.
    assert read[2].unreachable.samples[0] is read[1].unreachable.samples[0]
    assert read[2].unreachable.samples[0].stack is read[2].samples[0].stack


@pytest.mark.parametrize("change, message", [
    (lambda u: u.update(swept=1), "swept is not a bool"),
    (lambda u: u.update(blocks="3"), "blocks is not a int"),
    (lambda u: u.update(note=None), "note is not a str"),
    (lambda u: u.pop("held_ns"), "'held_ns'"),
    (lambda u: u.update(listed_blocks=True), "listed_blocks is not a int"),
    (lambda u: u.update(samples=[99]), "a profile names a sample that is not in the file"),
    (lambda u: u.update(base=0), "a profile's base is not a profile before it"),  # no sweep
    (lambda u: u.update(base=2), "a profile's base is not a profile before it"),
    (lambda u: u.update(length=9), "a profile's changes are not places in it"),
])
def test_a_damaged_sweep_is_refused_in_one_line(tmp_path, change, message):
    path = tmp_path / RESULTS_FILE
    write_results(Results(_swept_dumps(), []), path)
    data = json.loads(gzip.decompress(path.read_bytes()))
    change(data["profiles"][2]["unreachable"])
    _write(path, data)
    with pytest.raises(DroidheapError, match="is damaged") as error:
        read_results(path)
    assert message in str(error.value) and "\n" not in str(error.value)


def _many_stacks_trace(stacks: int, dumps: int, depth: int = 120) -> bytes:
    """`dumps` dumps of one process, each with every one of `stacks` distinct call stacks as deep
    as an interpreter's, drawn from a few thousand frames as a real program's are."""
    b = TraceBuilder().clock_snapshot().process(77, "/data/local/tmp/app")
    rng = random.Random(stacks)
    frames = [(APP, 0x1000 + 4 * i) for i in range(3000)]
    ids = [b.callstack([(LIBC, 0x1000)] + rng.choices(frames, k=depth - 2) + [(LIBC, 0x2000)])
           for _ in range(stacks)]
    for dump in range(dumps):
        b.dump({77: [(iid, 4096 * (dump + 1), 4096 * dump, dump + 1, dump) for iid in ids]},
               timestamp=(dump + 1) * 10**9 + 10**12)
    return b.to_bytes()


def _symbolize_capped(tmp_path, raw, cap_mb: int) -> subprocess.CompletedProcess:
    """`droidheap symbolize RAW` with its data (heap and anonymous memory) capped by RLIMIT_DATA:
    a cap of the process itself, whatever started it."""
    def cap():
        resource.setrlimit(resource.RLIMIT_DATA, (cap_mb << 20, cap_mb << 20))
    return subprocess.run(
        [sys.executable, "-m", "droidheap.cli", "symbolize", str(raw), "-o", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, preexec_fn=cap,
        env=dict(os.environ, DROIDHEAP_CACHE_DIR=str(tmp_path / "cache")))


def test_a_trace_of_many_thousand_stacks_converts_within_a_memory_cap(tmp_path):
    raw = tmp_path / "raw-trace"
    raw.write_bytes(_many_stacks_trace(8000, 12))  # 4.5 MB: 96,000 samples 120 frames deep
    # Each call stack held once, not dumps x samples x depth: before, this took 470 MB (RSS) and
    # wrote a report.html of 55 MB; now 150 MB.
    converted = _symbolize_capped(tmp_path, raw, cap_mb=250)
    assert converted.returncode == 0, converted.stderr[-2000:]
    results = load_results(tmp_path / "out")
    assert len(results.profiles) == 12 and len(results.profiles[-1].samples) == 8000
    assert (tmp_path / "out" / "report.html").stat().st_size < 5e6


def test_memory_running_out_is_one_line_and_the_trace_stays(converted, tmp_path, monkeypatch,
                                                             capsys):
    # Raised where the conversion and the report build the most: RLIMIT_DATA would find a
    # different place in each run (and CPython itself may not survive some of them).
    from droidheap import convert
    from droidheap.cli import main

    def exhausted(*args, **kwargs):
        raise MemoryError()
    raw = converted.parent / "raw-trace"
    monkeypatch.setattr(convert, "profiles_from_dumps", exhausted)
    with pytest.raises(DroidheapError) as error:
        convert_trace(raw, tmp_path / "again")
    assert str(error.value) == (f"not enough memory to convert {raw}: it is kept; convert it "
                                "where there is more with droidheap symbolize")
    assert raw.is_file()
    monkeypatch.setattr(load, "read_results", exhausted)
    assert main(["report", str(converted)]) == 1
    assert capsys.readouterr().err == ("droidheap: out of memory: the input is larger than this "
                                       "machine can hold\n")
