"""Growth over a run whose last dump came after the program exited, having freed what it grew:
diff, check --max-growth, the leak suspects and the report measure it over the dumps taken while
the program ran (or at its peak), and name the exit dump "at exit"."""
import dataclasses

from droidheap.cli import main
from droidheap.results.diff import series_growth
from droidheap.results.leaks import leak_suspects
from droidheap.results.report import build_report, report_json
from droidheap.results.text import format_report
from droidheap.trace.process_figures import CONNECTION_LOST, EXECED, EXITED, GUARDRAIL
from test_results import _series, _stored, app, profile, sample


def _exited(dumps, left=0, ending=EXITED):
    """`dumps` (taken while running), then the dump after the exit, holding `left` bytes at each
    site of the last one."""
    last = dumps[-1]
    samples = [sample(*s.stack, alloc=s.alloc_bytes, in_use=left) for s in last.samples]
    return dumps + [dataclasses.replace(profile(samples, dump=last.dump_index + 1),
                                        disconnected=True, ending=ending)]


def _grown_then_freed():
    """The issue's Python run: py_name grew 5.5 -> 35.5 MiB over dumps 0 to 3, freed at exit."""
    return _exited(_series({"py_name": [int(mib * 2**20) for mib in (5.5, 15.5, 25.5, 35.5)]}))


def _growth(profiles):
    growth, left_out = series_growth(profiles)
    assert left_out == []
    return growth


def _span(series):
    return (series.base.dump_index if series.base else None, series.current.dump_index)


def test_growth_runs_from_the_first_running_dump_to_the_last_not_to_the_exit():
    (series,) = _growth(_grown_then_freed())
    assert _span(series) == (0, 3)
    assert [(g.site.function, g.in_use_delta) for g in series.growth] == [("py_name", 30 * 2**20)]


def test_one_running_dump_grows_from_the_start_and_an_exit_dump_alone_is_compared_all_the_same():
    (one,) = _growth(_exited(_series({"a": [100]})))
    assert _span(one) == (None, 0) and one.growth[0].in_use_delta == 100
    # No -c: the dump after the exit is all there is.
    (only,) = _growth(_exited(_series({"a": [100]}), left=40)[1:])
    assert _span(only) == (None, 1) and only.current.at_exit
    assert only.growth[0].in_use_delta == 40


def test_a_lost_connection_ends_the_series_as_an_exit_does_but_a_guardrail_does_not():
    (lost,) = _growth(_exited(_series({"a": [100, 200]}), ending=CONNECTION_LOST))
    assert _span(lost) == (0, 1)
    # Ended by a guardrail, the process runs on: its last dump is a moment of the run.
    (ended,) = _growth(_exited(_series({"a": [100, 200]}), ending=GUARDRAIL))
    assert _span(ended) == (0, 2) and not ended.current.at_exit


def test_dumps_at_the_peak_grow_from_the_start_to_the_last_peak():
    peaks = _series({"a": [100, 300]}, at_peak=True)
    peaks[-1] = dataclasses.replace(peaks[-1], disconnected=True, ending=EXITED)
    (series,) = _growth(peaks)
    assert _span(series) == (None, 1) and series.growth[0].in_use_delta == 300
    assert not series.current.at_exit and series.current.dump_name == "dump 1 (peak)"


def test_leak_suspects_are_ranked_over_the_running_dumps():
    (suspect,) = leak_suspects(_grown_then_freed())
    assert suspect.site.function == "py_name"
    assert suspect.in_use_by_dump == [int(mib * 2**20) for mib in (5.5, 15.5, 25.5, 35.5)]


def test_the_report_opens_on_the_last_running_dump_and_names_the_exit_dump_at_exit():
    dumps = _grown_then_freed()
    assert dumps[-1].title == "pid 1 (/data/app/bin), heap libc.malloc, dump 4 (at exit)"
    lines = format_report(build_report(dumps)).splitlines()
    assert lines[0].startswith("pid 1 (/data/app/bin), heap libc.malloc, dump 3 of 5, 3.0 s after "
                               "the first; sampling"), lines
    assert "  at exit, dump 4 (report --dump 4): sampled in use 0 B in 0 objects" in lines
    (shown,) = report_json(build_report(dumps))["profiles"]
    assert (shown["dump"], shown["at_exit"], shown["exit_dump"]["dump"]) == (3, False, 4)
    assert format_report(build_report(dumps, dump=4)).startswith(
        "pid 1 (/data/app/bin), heap libc.malloc, dump 4 of 5, 4.0 s after the first (at exit); "
        "sampling")
    # No -c: the dump after the exit is all there is.
    only = format_report(build_report(dumps[-1:]))
    assert only.startswith("pid 1 (/data/app/bin), heap libc.malloc, one dump (at exit); sampling")
    assert "report --dump" not in only


def test_the_report_gives_the_verdict_of_the_sweep_at_exit_beside_the_last_running_dump():
    """LeakSanitizer's moment is the exit: its sweep is the verdict, whichever dump is shown."""
    from droidheap.results.model import Unreachable
    from test_results import EXACT
    dumps = _grown_then_freed()
    dumps[2].unreachable = Unreachable([], complete=True, blocks_swept=9, blocks=0, bytes=0)
    dumps[-1].unreachable = EXACT
    report = build_report(dumps)
    lines = format_report(report).splitlines()
    assert lines[0].startswith("pid 1 (/data/app/bin), heap libc.malloc, dump 3 of 5"), lines
    assert ("unreachable (leaked), pid 1 (/data/app/bin), heap libc.malloc, dump 4 (at exit): "
            "3.9 KiB in 90 blocks, every block known (exact)") in lines
    assert report_json(report)["profiles"][0]["unreachable"]["dump"] == 4
    # Asked for by number, a dump's own sweep.
    (asked,) = report_json(build_report(dumps, dump=2))["profiles"]
    assert (asked["unreachable"]["dump"], asked["unreachable"]["bytes"]) == (2, 0)


def test_diff_of_two_runs_compares_their_last_running_dumps(tmp_path, capsys):
    """Both runs freed everything at exit: their exit dumps would say nothing grew."""
    smaller = _exited(_series({"py_name": [1 << 20, 2 << 20]}))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    code, lines, _ = _run(capsys, "diff", _stored(tmp_path / "a", smaller),
                          _stored(tmp_path / "b", _grown_then_freed()))
    assert code == 0 and lines[1].endswith(": +33.5 MiB"), lines


def _run(capsys, *args):
    code = main([*map(str, args)])
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


def test_check_fails_on_growth_while_running_that_was_freed_at_exit(tmp_path, capsys):
    out = _stored(tmp_path, _grown_then_freed())
    code, lines, _ = _run(capsys, "check", out, "--max-growth", "1MiB")
    assert code == 1 and lines == [
        "FAIL: py_name (app.c:1) grew by 30.0 MiB in pid 1 (/data/app/bin), heap libc.malloc "
        "from dump 0 to dump 3 (bound 1.0 MiB)"]
    code, lines, _ = _run(capsys, "check", out, "--max-growth", "30MiB")
    assert code == 0 and lines == [
        "ok: no call site grew by more than 30.0 MiB; the most, +30.0 MiB, was py_name (app.c:1) "
        "in pid 1 (/data/app/bin), heap libc.malloc from dump 0 to dump 3"]


def test_diff_within_a_run_shows_the_growth_while_running(tmp_path, capsys):
    code, lines, _ = _run(capsys, "diff", _stored(tmp_path, _grown_then_freed()))
    assert code == 0
    assert lines[:2] == ["pid 1 (/data/app/bin), heap libc.malloc",
                         "bytes in use from dump 0 to dump 3: +30.0 MiB"]


def test_diff_from_and_to_choose_the_dumps_the_exit_dump_among_them(tmp_path, capsys):
    out = _stored(tmp_path, _grown_then_freed())
    for args, span in ((["--from", "3", "--to", "4"], "from dump 3 to dump 4 (at exit): -35.5 MiB"),
                       (["--from", "1"], "from dump 1 to dump 3: +20.0 MiB"),
                       (["--to", "2"], "from dump 0 to dump 2: +20.0 MiB"),
                       (["--to", "0"], "from the start to dump 0: +5.5 MiB")):
        code, lines, err = _run(capsys, "diff", out, *args)
        assert code == 0 and err == "" and lines[1] == f"bytes in use {span}", (args, lines)


def test_check_from_and_to_choose_the_dumps(tmp_path, capsys):
    out = _stored(tmp_path, _grown_then_freed())
    code, lines, _ = _run(capsys, "check", out, "--max-growth", "1MiB", "--from", "1", "--to", "2")
    assert code == 1 and lines == [
        "FAIL: py_name (app.c:1) grew by 10.0 MiB in pid 1 (/data/app/bin), heap libc.malloc "
        "from dump 1 to dump 2 (bound 1.0 MiB)"]


def test_a_dump_number_there_is_not_names_the_dumps_there_are(tmp_path, capsys):
    out = _stored(tmp_path, _grown_then_freed())
    code, lines, err = _run(capsys, "diff", out, "--from", "9")
    assert (code, lines) == (1, [])
    assert err == f"droidheap: {out} has no dump 9 (dumps 0 to 3 and dump 4 at exit)\n"
    code, _, err = _run(capsys, "diff", out, "--from", "0", "--to", "9")
    assert err.startswith(f"droidheap: {out} has no process with both dump 0 and dump 9 (")


def test_a_process_without_the_dumps_asked_for_is_left_out_saying_so(tmp_path, capsys):
    short = _series({"other": [100]}, pid=2)
    out = _stored(tmp_path, _grown_then_freed() + short)
    code, lines, err = _run(capsys, "diff", out, "--to", "2")
    assert code == 0 and lines[0] == "pid 1 (/data/app/bin), heap libc.malloc"
    assert err == "warning: pid 2 (/data/app/bin), heap libc.malloc lacks dump 2: left out\n"
    _, _, err = _run(capsys, "diff", out, "--to", "7")
    assert err == (f"droidheap: {out} has no dump 7 (pid 1: dumps 0 to 3 and dump 4 at exit; "
                   "pid 2: dump 0)\n")


def test_from_and_to_are_of_one_path_and_of_the_growth_gate(tmp_path, capsys):
    out = _stored(tmp_path, _grown_then_freed())
    for args in (["diff", out, out, "--from", "0"],
                 ["check", out, "--max-unreachable", "1k", "--to", "1"]):
        code, lines, err = _run(capsys, *args)
        assert code == 2 and lines == [] and len(err.splitlines()) == 1, (args, err)
        assert "--from and --to" in err


def test_the_page_shows_the_last_running_dump_and_the_exit_dump_whatever_the_cap():
    from droidheap.results.page import MAX_FLAMEGRAPH_DUMPS, page_data
    dumps = _exited(_series({"a": list(range(100, 6100, 100))}))  # 60 running, then the exit
    shown = [(p["dump"], p["at_exit"]) for p in page_data(dumps, "droidheap: bin")["profiles"]]
    assert len(shown) <= MAX_FLAMEGRAPH_DUMPS and shown[-2:] == [(59, False), (60, True)]


def test_a_process_that_execs_starts_a_series_anew():
    """A shell that execs the program (`exec env X=1 prog`, pyenv's shims): growth is the
    program's, from its own first dump, not from the shell's."""
    shell = [profile([sample(app("sh_site"), alloc=64 << 20, in_use=64 << 20)], dump=0),
             dataclasses.replace(profile([sample(app("sh_site"), alloc=64 << 20)], dump=1),
                                 disconnected=True, ending=EXECED)]
    program = [profile([sample(app("grows"), alloc=size, in_use=size)], dump=i)
               for i, size in ((2, 1 << 20), (3, 5 << 20))]
    growth, _ = series_growth(shell + program)
    assert [(s.base and s.base.dump_index, s.current.dump_index) for s in growth] == [
        (None, 0), (2, 3)]  # the shell's from the start to its one dump before the exec
    s = growth[1]
    assert [(g.site.function, g.in_use_delta) for g in s.growth] == [("grows", 4 << 20)]
