"""Call sites, bottom-up trees, leak ranking and growth, on hand-made profiles; the report, diff and
check commands on bad input; what a sweep for unreachable memory found, in the report, --json,
check --max-unreachable, the page's data and a pprof file's sample types."""
import gzip

import pytest

from droidheap.results.diff import series_growth, site_growth
from droidheap.results.leaks import leak_suspects
from droidheap.cli import main
from droidheap.results.load import load_results
from droidheap.results.model import Location, Profile, Results, StackSample, Unreachable
from droidheap.results.report import build_report, report_json
from droidheap.results.store import RESULTS_FILE, write_results
from droidheap.results.sites import (CallStack, bottom_up, call_site, profile_sites, site_figures,
                                     top_sites)
from droidheap.results import sites
from droidheap.results.html import render_html
from droidheap.results.text import format_report, unreachable_verdict
from fixtures_trace import APP as APP_MAPPING, TraceBuilder
from test_cli_errors import assert_one_line_error, run_cli

LIBC, LIBSTDCXX, APP = "/lib/libc.so.6", "/usr/lib/libstdc++.so.6.0.30", "/data/app/bin"
NEW = Location("operator new(unsigned long)", module=LIBSTDCXX)
STRDUP = Location("__strdup", "strdup.c", 42, LIBC)
MAIN = Location("main", "app.c", 10, APP)


def app(function: str, line: int = 1) -> Location:
    return Location(function, "app.c", line, APP)


def sample(*stack, alloc=0, in_use=0) -> StackSample:
    return StackSample(CallStack(stack), alloc // 16, alloc, in_use // 16, in_use)


def profile(samples, dump=0, pid=1, heap="libc.malloc", at_peak=False) -> Profile:
    return Profile(pid=pid, cmdline="/data/app/bin --x", heap=heap, dump_index=dump,
                   timestamp_ns=(dump + 1) * 10**9, sampling_interval_bytes=4096,
                   samples=list(samples), at_peak=at_peak)


def test_call_site_is_the_first_frame_outside_the_runtime():
    inlined_template = Location("void std::vector<int, std::allocator<int> >::_M_realloc_insert"
                                "<int const&>(int const&)", "vector.tcc", 453, APP)
    assert call_site((NEW, inlined_template, app("grow"), MAIN)) == app("grow")
    assert call_site((STRDUP, app("copy"), MAIN)) == app("copy")
    # An unsymbolized frame of libc is still libc's.
    assert call_site((Location("libc.so.6+0x9a1c0", module=LIBC), MAIN)) == MAIN
    # Runtime all the way down: the leaf.
    assert call_site((NEW, STRDUP)) == NEW
    assert call_site(()) == Location("?")


def test_top_sites_merge_stacks_by_site_and_rank_by_the_metric():
    samples = [sample(NEW, app("a"), MAIN, alloc=100, in_use=100),
               sample(NEW, app("a"), app("b"), MAIN, alloc=50, in_use=0),
               sample(app("c"), MAIN, alloc=400, in_use=10)]
    by_in_use = top_sites(samples, "in_use_bytes")
    assert [(s.site.function, s.in_use_bytes, s.alloc_bytes) for s in by_in_use] == [
        ("a", 100, 150), ("c", 10, 400)]
    assert [s.site.function for s in top_sites(samples, "alloc_bytes", limit=1)] == ["c"]


def test_bottom_up_tree_follows_the_callers_of_each_site():
    samples = [sample(NEW, app("a"), app("b"), MAIN, in_use=300),
               sample(NEW, app("a"), app("c"), MAIN, in_use=100)]
    (root,) = bottom_up(samples)
    assert (root.location.function, root.figures.in_use_bytes) == ("a", 400)
    assert [(c.location.function, c.figures.in_use_bytes) for c in root.children] == [
        ("b", 300), ("c", 100)]
    assert root.children[0].children[0].location == MAIN


def _series(values_by_site, **kwargs):
    return [profile([sample(app(site), MAIN, alloc=v, in_use=v)
                     for site, values in values_by_site.items() if values[i]
                     for v in [values[i]]], dump=i, **kwargs)
            for i in range(len(next(iter(values_by_site.values()))))]


def test_leaks_rank_steady_growth_over_one_jump():
    dumps = _series({"leak": [100, 200, 300, 400, 500],
                     "cache": [0, 0, 5000, 5000, 5000],
                     "noisy": [100, 300, 200, 400, 350],
                     "freed": [500, 400, 300, 200, 100]})
    suspects = leak_suspects(dumps)
    assert [s.site.function for s in suspects] == ["leak", "noisy"]
    assert suspects[0].in_use_by_dump == [100, 200, 300, 400, 500]
    assert (suspects[0].growth_bytes, suspects[0].steadiness) == (400, 1.0)


def test_no_leak_suspects_from_too_few_dumps_or_from_peaks():
    assert leak_suspects(_series({"leak": [100, 200]})) == []
    assert leak_suspects(_series({"leak": [100, 200, 300]}, at_peak=True)) == []
    # Each process's heap is a series of its own.
    both = _series({"leak": [100, 200, 300]}) + _series({"leak": [1, 2, 3]}, pid=2)
    assert [(s.pid, s.growth_bytes) for s in leak_suspects(both)] == [(1, 200), (2, 2)]


def test_a_dumps_sites_made_from_the_dump_before_are_those_of_its_samples(monkeypatch):
    quiet = [sample(app("quiet", line), MAIN, in_use=100) for line in (1, 2, 3)]
    busy = sample(app("busy"), MAIN, in_use=100)
    grown = [*quiet, sample(app("busy"), MAIN, alloc=300, in_use=200),
             sample(app("new"), MAIN, in_use=5)]
    moved = [*quiet, sample(app("elsewhere"), MAIN, in_use=100)]  # a place of another site
    shorter = quiet[:2]
    made_whole = []
    monkeypatch.setattr(sites, "site_figures",
                        lambda samples: made_whole.append(1) or site_figures(samples))
    for now, whole in ((grown, False), (moved, True), (shorter, True), ([busy] * 4, True)):
        before = profile([*quiet, busy])
        profile_sites(before)
        made_whole.clear()
        after = profile(now, dump=1)
        assert list(profile_sites(after, before).items()) == list(site_figures(now).items())
        assert made_whole == [1] * whole
        # The dump before keeps its own figures.
        assert before.sites[("busy", "app.c", 1, "bin")].in_use_bytes == 100


def test_growth_between_two_profiles_puts_the_most_grown_first():
    before = profile([sample(app("a"), in_use=100), sample(app("gone"), in_use=50)])
    after = profile([sample(app("a"), in_use=400), sample(app("new"), in_use=10)], dump=1)
    growth = site_growth([before], [after])
    assert [(g.site.function, g.in_use_delta) for g in growth] == [
        ("a", 300), ("new", 10), ("gone", -50)]
    (series,), _ = series_growth([after, before])
    assert (series.base, series.current) == (before, after)
    (single,), _ = series_growth([before])
    assert single.base is None and single.growth[0].in_use_delta == 100


def test_report_json_and_text_of_a_dump():
    dumps = _series({"leak": [100, 200, 300]})
    report = build_report(dumps)
    data = report_json(report)
    (p,) = data["profiles"]
    assert (p["dump"], p["dumps"], p["seconds"]) == (2, 3, 2.0)
    assert p["top_sites_by_in_use"][0]["function"] == "leak"
    assert data["leak_suspects"][0]["growth_bytes"] == 200
    text = format_report(report)
    assert "dump 2 of 3, 2.0 s after the first;" in text and "leak suspects" in text
    assert build_report(dumps, dump=0).profiles[0].profile.dump_index == 0


def test_a_dump_is_named_by_which_of_how_many_and_when_after_the_first():
    dumps = _series({"leak": [100, 200, 300]})
    first = format_report(build_report(dumps, dump=0)).splitlines()[0]
    assert first.startswith("pid 1 (/data/app/bin), heap libc.malloc, dump 0 of 3; sampling"), first
    # One dump: no index to count from, no time since itself.
    (only,) = format_report(build_report(dumps[2:])).splitlines()[:1]
    assert only.startswith("pid 1 (/data/app/bin), heap libc.malloc, one dump; sampling"), only


def write_pprof_dir(tmp_path, function="f", file="app.c"):
    """An output directory with one real pprof file, written the way convert writes them: 4 KiB
    in use at `function` (`file`:3)."""
    from droidheap.pprof import Profile as PprofProfile
    message = PprofProfile(string_table=["", "inuse_space", "bytes", function, file])
    message.sample_type.add(type=1, unit=2)
    message.function.add(id=1, name=3, filename=4)
    message.location.add(id=1, address=0x10).line.add(function_id=1, line=3)
    message.sample.add(location_id=[1], value=[4096])
    out = tmp_path / "out"
    out.mkdir()
    (out / "heap_dump.0.7.libc.malloc.pb.gz").write_bytes(gzip.compress(
        message.SerializeToString()))
    return out


def test_report_reads_a_pprof_directory(tmp_path):
    result = run_cli(["report", write_pprof_dir(tmp_path)], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("pid 7 (?), heap libc.malloc, one dump;")
    assert "4.0 KiB" in result.stdout and "f (app.c:3)" in result.stdout


@pytest.mark.parametrize("args, expected, code", [
    (["report", "{tmp}/missing"], "does not exist", 1),
    (["report", "{tmp}/empty"], "holds no trace", 1),
    (["report", "{tmp}/garbage.pb.gz"], "is not a readable pprof file", 1),
    (["report", "{tmp}/garbage"], "is neither a Perfetto trace nor a pprof file", 1),
    (["report", "{out}", "--dump", "3"], "no dump 3 (the dumps are 0 to 0)", 1),
    (["diff", "{tmp}/missing"], "does not exist", 1),
    (["check", "{tmp}/missing", "--max-growth", "1k"], "does not exist", 2),
    (["check", "{tmp}/garbage.pb.gz", "--max-growth", "1k"], "is not a readable pprof file", 2),
    (["check", "{out}", "--max-growth", "1k", "--from", "3"], "has no dump 3 (dump 0)", 2),
    (["check", "{out}"], "give --max-growth, --max-unreachable or both", 2),
    (["check", "{out}", "--max-growth", "lots"], "'lots' is not a size", 2),
    (["check", "{out}", "--max-growth", "1k", "--site", "("], "is not a regular expression", 2),
])
def test_results_commands_reject_bad_input_in_one_line(tmp_path, args, expected, code):
    out = write_pprof_dir(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "garbage.pb.gz").write_bytes(gzip.compress(b"\xff\xff\xff"))
    (tmp_path / "garbage").write_bytes(b"\xff\xff\xff not a trace")
    args = [a.format(tmp=tmp_path, out=out) for a in args]
    assert_one_line_error(run_cli(args, tmp_path), expected, code)


def test_check_passes_and_fails_on_a_single_dump_from_the_start(tmp_path):
    out = write_pprof_dir(tmp_path)
    failed = run_cli(["check", out, "--max-growth", "1k"], tmp_path)
    assert failed.returncode == 1 and failed.stdout.startswith("FAIL: f (app.c:3) grew by 4.0 KiB")
    assert "from the start of profiling to dump 0 (bound 1.0 KiB)" in failed.stdout
    passed = run_cli(["check", out, "--max-growth", "4k"], tmp_path)
    assert passed.returncode == 0 and passed.stdout.startswith("ok: "), passed.stdout


def write_trace(path, *cmdline: str, pid: int = 100):
    """A trace of one dump of `cmdline`, one call site of 4 KiB in use."""
    builder = TraceBuilder().clock_snapshot().process(pid, *cmdline)
    stack = builder.callstack([(APP_MAPPING, 0x2000)])
    path.write_bytes(builder.dump({pid: [(stack, 4096, 0, 1, 0)]}).to_bytes())
    return str(path)


def test_diff_of_two_different_programs_says_so_and_compares_them_all_the_same(tmp_path):
    toybox = write_trace(tmp_path / "toybox", "/system/bin/toybox", "sort")
    mksh = write_trace(tmp_path / "mksh", "/system/bin/sh", "-c", "loop")
    unrelated = run_cli(["diff", toybox, mksh], tmp_path)
    assert unrelated.returncode == 0, unrelated.stderr
    assert unrelated.stderr.splitlines() == [
        f"warning: {toybox} profiles toybox and {mksh} profiles sh: different programs, compared "
        "as if one had become the other"]
    assert unrelated.stdout.startswith("heap libc.malloc\nNo call site changed between")
    # The same program elsewhere, or an app's other process, is the same program.
    again = write_trace(tmp_path / "again", "./toybox", "sort", pid=300)
    app = write_trace(tmp_path / "app", "com.example.app")
    service = write_trace(tmp_path / "service", "com.example.app:remote")
    for base, current in ((toybox, again), (app, service), (write_pprof_dir(tmp_path), toybox)):
        related = run_cli(["diff", base, current], tmp_path)
        assert related.returncode == 0 and related.stderr == "", related.stderr


def test_page_data_times_each_dump_from_its_process_first_and_counts_its_dumps():
    from droidheap.results.page import page_data
    late = profile([sample(app("a"), alloc=16)], dump=3, pid=2)  # its process began later
    data = page_data(_series({"a": [16, 32]}) + [late], "droidheap: bin")
    assert [(p["pid"], p["dump"], p["dumps"], p["time_s"]) for p in data["profiles"]] == [
        (1, 0, 2, 0.0), (1, 1, 2, 1.0), (2, 3, 1, 0.0)]


def test_page_data_interns_frames_books_sites_and_caps_the_flamegraph_dumps():
    from droidheap.results.page import MAX_FLAMEGRAPH_DUMPS, page_data
    dumps = [profile([sample(NEW, app("leak"), MAIN, alloc=100 * (i + 1), in_use=100 * (i + 1))],
                     dump=i) for i in range(60)]
    data = page_data(dumps, "droidheap: bin")
    shown = [p["dump"] for p in data["profiles"]]
    assert len(shown) <= MAX_FLAMEGRAPH_DUMPS and shown[-1] == 59 and shown == sorted(shown)
    frames = data["frames"]
    assert len(frames) == 3  # operator new, leak, main: once each
    stack, site = data["profiles"][-1]["samples"][0][:2]
    assert [frames[i]["function"] for i in data["stacks"][stack]] == [NEW.function, "leak", "main"]
    assert frames[site]["function"] == "leak" and frames[site]["where"] == "app.c:1"
    (series,) = data["growth"]
    assert len(series["points"]) == 60 and series["points"][-1][1] == 6000  # every dump
    assert frames[data["leaks"][0]["frame"]]["function"] == "leak"


def test_the_page_keeps_the_largest_stacks_and_folds_the_rest_per_site_exactly():
    from droidheap.results.page import FOLDED_SITES, STACKS_PER_METRIC, page_data

    def many(stacks):  # 4 sites per 10 stacks; sizes spread so that none ties
        sites = stacks // 10 * 4
        return profile([sample(NEW, app(f"site{i % sites}"), app(f"caller{i}"), MAIN,
                               alloc=16 * (i % 977 + 1), in_use=16 * (i % 13))
                        for i in range(stacks)])
    sizes = {}
    for stacks in (4000, 40000):
        dump = many(stacks)
        data = page_data([dump], "t")
        (shown,) = data["profiles"]
        rows = shown["samples"]
        assert len(rows) <= 4 * STACKS_PER_METRIC + FOLDED_SITES + 1
        # Every column's total and every shown site's figures stay exact.
        for column, metric in enumerate(("alloc_count", "alloc_bytes", "in_use_count",
                                         "in_use_bytes"), start=2):
            assert sum(r[column] for r in rows) == sum(getattr(s, metric) for s in dump.samples)
        frames = data["frames"]
        by_site = {}
        for row in rows:
            by_site.setdefault(frames[row[1]]["function"], []).append(row)
        folded = [r for r in rows if frames[data["stacks"][r[0]][-1]]["function"] ==
                  "[smaller call stacks, folded]"]
        assert folded and len(folded) <= FOLDED_SITES + 1
        # The sites the page's table shows (the largest by each metric) are exact.
        for metric, column in (("alloc_bytes", 3), ("in_use_bytes", 5)):
            shown_sums = sorted((sum(r[column] for r in site_rows)
                                 for function, site_rows in by_site.items()
                                 if function != "[other call sites]"), reverse=True)
            assert shown_sums[:30] == [s.value(metric) for s in top_sites(dump.samples, metric, 30)]
        assert any("folded per call site" in note for note in shown["notes"])
        sizes[stacks] = len(render_html(data))
    assert sizes[40000] < 1.5 * sizes[4000], sizes  # bounded, not ten times larger


def leaked(*stack, size) -> StackSample:
    """A sweep's sample: `size` bytes unreachable in blocks of 16."""
    return StackSample(CallStack(stack), 0, 0, size // 16, size)


LOST = leaked(NEW, app("lost"), MAIN, size=3008)
DROPPED = leaked(app("dropped"), MAIN, size=992)
# At -i 1 from the start: every block known, the verdict exact (4000 bytes in 90 blocks).
EXACT = Unreachable([LOST, DROPPED], complete=True, blocks_swept=161, blocks=90, bytes=4000,
                    held_ns=568_000)


def _swept_series(unreachable=EXACT, **kwargs):
    """Three dumps of a steady leak, the last swept."""
    dumps = _series({"leak": [100, 200, 300]}, **kwargs)
    dumps[-1].unreachable = unreachable
    return dumps


@pytest.mark.parametrize("unreachable, verdict", [
    (EXACT, "3.9 KiB in 90 blocks, every block known (exact)"),
    (Unreachable([], complete=True, blocks_swept=161, blocks=0, bytes=0),
     "none, every block known (exact)"),
    (Unreachable([LOST], blocks_swept=40, blocks=2, bytes=96, note="registers not read"),
     "~2.9 KiB estimated from 2 of 40 sampled blocks (blocks not sampled were not judged); "
     "registers not read"),
    (Unreachable([], blocks_swept=40, blocks=0, bytes=0),
     "none of 40 sampled blocks (blocks not sampled were not judged)"),
    (Unreachable([LOST], blocks_swept=40, blocks=2, bytes=96, listed_blocks=5000),
     "~2.9 KiB estimated from 2 of 40 sampled blocks (followed through all 5000 blocks the "
     "allocator listed)"),
    (Unreachable([LOST, DROPPED]),  # a pprof file's: samples only
     "~3.9 KiB in ~250 blocks, estimated from the sampled blocks (blocks not sampled were not "
     "judged)"),
    (Unreachable([], swept=False, note="the process exited before the sweep"),
     "not swept: the process exited before the sweep"),
])
def test_a_sweeps_verdict_says_what_was_judged(unreachable, verdict):
    assert unreachable_verdict(unreachable) == verdict


def test_the_report_lists_unreachable_call_sites_above_the_leak_suspects():
    text = format_report(build_report(_swept_series()))
    header = ("unreachable (leaked), pid 1 (/data/app/bin), heap libc.malloc, dump 2: 3.9 KiB in 90 "
              "blocks, every block known (exact)")
    assert header in text.splitlines(), text
    block = text[text.index(header):]
    assert block.index("lost (app.c:1)") < block.index("dropped (app.c:1)") < block.index(
        "leak suspects")
    assert "      2.9 KiB      188  lost (app.c:1)  [bin]" in block, block
    # A dump whose sweep did not run says why, in one line; one without --unreachable nothing.
    skipped = format_report(build_report(_swept_series(Unreachable([], swept=False, note="why"))))
    assert "unreachable (leaked), pid 1 (/data/app/bin), heap libc.malloc, dump 2: not swept: why" \
        in skipped.splitlines()
    assert "unreachable" not in format_report(build_report(_series({"leak": [100, 200, 300]})))


def test_report_json_gives_the_sweep_per_profile_or_null():
    (p,) = report_json(build_report(_swept_series()))["profiles"]
    assert p["unreachable"] == {
        "dump": 2, "complete": True, "blocks_swept": 161, "blocks": 90, "bytes": 4000,
        "held_ns": 568_000,
        "listed_blocks": None, "estimated_count": 250, "estimated_bytes": 4000, "note": "",
        "top_sites": [
            {"function": "lost", "file": "app.c", "line": 1, "module": APP,
             "estimated_count": 188, "estimated_bytes": 3008},
            {"function": "dropped", "file": "app.c", "line": 1, "module": APP,
             "estimated_count": 62, "estimated_bytes": 992}]}
    for unreachable in (None, Unreachable([], swept=False, note="why")):
        (p,) = report_json(build_report(_swept_series(unreachable)))["profiles"]
        assert p["unreachable"] is None


def _stored(tmp_path, profiles):
    """An output directory holding only what a conversion stores of `profiles`."""
    out = tmp_path / "out"
    out.mkdir()
    write_results(Results(profiles, []), out / RESULTS_FILE)
    return str(out)


def _check(capsys, *args):
    code = main(["check", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


def test_check_max_unreachable_fails_naming_the_top_unreachable_sites(tmp_path, capsys):
    out = _stored(tmp_path, _swept_series())
    code, lines, _ = _check(capsys, out, "--max-unreachable", "1k")
    assert code == 1 and lines == [
        "FAIL: 3.9 KiB unreachable in pid 1 (/data/app/bin), heap libc.malloc, dump 2 (bound "
        "1.0 KiB): lost (app.c:1) 2.9 KiB, dropped (app.c:1) 992 B"]
    code, lines, _ = _check(capsys, out, "--max-unreachable", "4000")
    assert code == 0 and lines == [
        "ok: no process held more than 3.9 KiB unreachable; the most, 3.9 KiB, in pid 1 "
        "(/data/app/bin), heap libc.malloc, dump 2"]
    # --site counts the matching sites' bytes only.
    code, lines, _ = _check(capsys, out, "--max-unreachable", "1k", "--site", "^dropped")
    assert code == 0 and lines[0].startswith("ok: no process held more than 1.0 KiB"), lines


def test_check_judges_a_sampled_sweep_by_its_estimate_at_the_last_dump_swept(tmp_path, capsys):
    dumps = _swept_series(Unreachable([LOST], blocks_swept=40, blocks=2, bytes=96))
    dumps[1].unreachable = dumps[2].unreachable
    dumps[2].unreachable = Unreachable([], swept=False, note="the process had exited")
    code, lines, _ = _check(capsys, _stored(tmp_path, dumps), "--max-unreachable", "2k",
                            "--max-growth", "1M")
    assert code == 1 and lines == [
        "FAIL: 2.9 KiB (estimated) unreachable in pid 1 (/data/app/bin), heap libc.malloc, dump 1 "
        "(bound 2.0 KiB): lost (app.c:1) 2.9 KiB",
        "ok: no call site grew by more than 1.0 MiB; the most, +200 B, was leak (app.c:1) in pid "
        "1 (/data/app/bin), heap libc.malloc from dump 0 to dump 2"]


def test_check_max_unreachable_of_a_run_never_swept_is_an_error(tmp_path, capsys):
    code, lines, err = _check(capsys, _stored(tmp_path, _series({"leak": [100, 200]})),
                              "--max-unreachable", "1k")
    assert code == 2 and lines == []
    assert err == (f"droidheap: {tmp_path / 'out'} has no sweep for unreachable memory (profile "
                   "with --unreachable)\n")


def test_check_of_sweeps_that_found_nothing_passes(tmp_path, capsys):
    nothing = Unreachable([], blocks_swept=40, blocks=0, bytes=0)
    code, lines, _ = _check(capsys, _stored(tmp_path, _swept_series(nothing)),
                            "--max-unreachable", "0")
    assert code == 0 and lines == [
        "ok: the sweeps found nothing unreachable among the sampled blocks"]


def test_page_data_carries_a_sweeps_verdict_and_rows_over_the_same_stacks():
    from droidheap.results.page import page_data
    dumps = _swept_series()
    dumps[-1].samples.append(LOST._replace(alloc_count=1, alloc_bytes=16))
    data = page_data(dumps, "t")
    *earlier, last = data["profiles"]
    assert all("unreachable" not in p for p in earlier)
    u = last["unreachable"]
    assert (u["swept"], u["verdict"], u["notes"]) == (
        True, "3.9 KiB in 90 blocks, every block known (exact)", [])
    frames = data["frames"]
    assert [(frames[row[1]]["function"], row[2:]) for row in u["samples"]] == [
        ("lost", [0, 0, 188, 3008]), ("dropped", [0, 0, 62, 992])]
    # The heap's sample on the same stack is the same stack row.
    assert u["samples"][0][0] == last["samples"][-1][0]


def _pprof(tmp_path, types, values):
    """A pprof file of `types`, one sample of `values` per stack (leaf `f0`, `f1`, ...)."""
    from droidheap.pprof import Profile as PprofProfile
    names = sorted({t for t in types} | {f"f{i}" for i in range(len(values))})
    strings = ["", "count", "app.c"] + names
    message = PprofProfile(string_table=strings)
    for t in types:
        message.sample_type.add(type=strings.index(t), unit=1)
    for i, sample_values in enumerate(values, start=1):
        message.function.add(id=i, name=strings.index(f"f{i - 1}"), filename=2)
        message.location.add(id=i, address=0x10 * i).line.add(function_id=i, line=i)
        message.sample.add(location_id=[i], value=sample_values)
    path = tmp_path / "heap_dump.0.7.libc.malloc.pb.gz"
    path.write_bytes(gzip.compress(message.SerializeToString()))
    return path


def test_a_pprof_with_the_sweeps_sample_types_fills_unreachable(tmp_path):
    types = ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space",
             "unreachable_objects", "unreachable_space"]
    (p,) = load_results(_pprof(tmp_path, types, [[4, 256, 2, 128, 0, 0],
                                                 [0, 0, 0, 0, 3, 4000]])).profiles
    assert [(s.stack[0].function, *s[1:]) for s in p.samples] == [("f0", 4, 256, 2, 128)]
    assert [(s.stack[0].function, *s[1:]) for s in p.unreachable.samples] == [("f1", 0, 0, 3, 4000)]
    assert (p.unreachable.swept, p.unreachable.complete, p.unreachable.blocks,
            p.unreachable.bytes) == (True, False, None, None)
    # A sweep that found nothing; a pprof of no sweep.
    assert load_results(_pprof(tmp_path, types, [[4, 256, 2, 128, 0, 0]])).profiles[
        0].unreachable == Unreachable([])
    assert load_results(_pprof(tmp_path, types[:4], [[4, 256, 2, 128]])).profiles[
        0].unreachable is None


def test_a_pprof_of_other_names_reads_its_last_value_but_a_sweeps_as_bytes_in_use(tmp_path):
    (p,) = load_results(_pprof(tmp_path, ["objects", "space", "unreachable_space"],
                               [[1, 64, 0], [0, 0, 48]])).profiles
    assert [s.in_use_bytes for s in p.samples] == [64]
    assert [s.in_use_bytes for s in p.unreachable.samples] == [48]
