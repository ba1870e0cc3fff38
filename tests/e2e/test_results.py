"""report, diff and check on a real run with continuous dumps (tests/programs/leaky.c): the leak
ranks first among the suspects, the one-off cache and the churn do not; check fails naming the
leak and passes where the bound or the site filter allows; diff shows the leak's growth. Run as
`leaky free`, which frees it all before it exits, the growth is still the growth while it ran,
and the dump after its exit is named so; check exits 2 when it has nothing to judge."""
import json

import pytest

from tests.chromium import Page, dump_dom
from tests.e2e.conftest import HOST_ABI_ONLY

pytestmark = HOST_ABI_ONLY  # what the host makes of a run

LEAK, CACHE, CHURN = "site_leak", "site_cache", "site_churn"


@pytest.fixture(scope="module")
def leaky_out(programs, abi, tmp_path_factory):
    from tests.e2e.conftest import Cli
    root = tmp_path_factory.mktemp(f"leaky-device-{abi}")
    out = tmp_path_factory.mktemp(f"leaky-{abi}") / "out"
    cli = Cli(root, abi)
    result = cli.run("--local", "-c", "500", "-o", out, "--", programs("leaky"))
    assert result.returncode == 0, result.stderr
    return cli, out, result.stderr


@pytest.fixture(scope="module")
def freed_out(programs, abi, tmp_path_factory):
    """A run of `leaky free` with continuous dumps: (cli, OUT, the number of the dump at exit)."""
    from tests.e2e.conftest import Cli
    root = tmp_path_factory.mktemp(f"freed-device-{abi}")
    out = tmp_path_factory.mktemp(f"freed-{abi}") / "out"
    cli = Cli(root, abi)
    result = cli.run("--local", "-c", "500", "-o", out, "--", programs("leaky"), "free")
    assert result.returncode == 0, result.stderr
    (shown,) = json.loads(cli.run("report", out, "--json").stdout)["profiles"]
    # The report opens on the last dump taken while it ran, and names the one after the exit.
    at_exit = shown["exit_dump"]
    assert not shown["at_exit"] and at_exit["in_use_bytes"] < 64 * 1024, shown
    assert shown["sampled"]["in_use_bytes"] > 1 << 20, shown
    return cli, out, at_exit["dump"]


def test_summary_and_report_rank_the_steady_leak_first(leaky_out):
    cli, out, summary = leaky_out
    suspects = summary.split("leak suspects")[1].splitlines()[2:]
    assert suspects and LEAK in suspects[0], summary
    assert not any(CACHE in line or CHURN in line for line in suspects), summary
    report = cli.run("report", out)
    assert report.returncode == 0, report.stderr
    assert "top call sites by bytes in use:" in report.stdout
    assert "top call sites by bytes allocated:" in report.stdout
    assert "bottom-up, by bytes in use" in report.stdout
    assert "samples lost: none" in report.stdout
    data = json.loads(cli.run("report", out, "--json").stdout)
    (profile,) = data["profiles"]
    assert profile["dumps"] >= 3 and not profile["at_exit"], profile["dump"]
    # The exact counts are whole at the dump after the exit.
    exit_dump = str(profile["exit_dump"]["dump"])
    at_exit_report = cli.run("report", out, "--json", "--dump", exit_dump)
    (at_exit,) = json.loads(at_exit_report.stdout)["profiles"]
    assert at_exit["at_exit"] and at_exit["exact"]["alloc_count"] >= 60 + 60 + 8
    assert profile["top_sites_by_in_use"][0]["function"] == LEAK
    # The churn keeps nothing but allocates the most: 60 x 64 KiB.
    assert profile["top_sites_by_allocated"][0]["function"] == CHURN
    assert profile["top_sites_by_allocated"][0]["file"].endswith("leaky.c")
    (top_tree,) = [n for n in profile["bottom_up"] if n["function"] == LEAK]
    assert top_tree["callers"][0]["function"] == "main"
    assert data["leak_suspects"][0]["function"] == LEAK
    series = data["leak_suspects"][0]["in_use_by_dump"]
    assert series == sorted(series) and series[-1] > series[0]


def test_check_fails_naming_the_site_that_grew(leaky_out):
    cli, out, _ = leaky_out
    failed = cli.run("check", out, "--max-growth", "512k")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert any(line.startswith(f"FAIL: {LEAK} (leaky.c:") for line in failed.stdout.splitlines())
    assert CHURN not in failed.stdout
    # The churn never holds more than one block; a bound above the leak's growth passes too.
    for args in (["--site", "churn"], ["--max-growth", "64M"]):
        passed = cli.run("check", out, "--max-growth", "512k", *args)
        assert passed.returncode == 0, passed.stdout + passed.stderr
        assert passed.stdout.startswith("ok: "), passed.stdout


def test_diff_within_a_run_and_between_two_dumps(leaky_out):
    cli, out, _ = leaky_out
    within = cli.run("diff", out)
    assert within.returncode == 0, within.stderr
    assert LEAK in within.stdout.splitlines()[3], within.stdout  # the most grown, first
    pprofs = sorted(out.glob("heap_dump.*.pb.gz"), key=lambda p: int(p.name.split(".")[1]))
    between = json.loads(cli.run("diff", pprofs[0], pprofs[-1], "--json").stdout)
    (heap,) = between
    grown = {s["function"]: s["in_use_delta"] for s in heap["sites"]}
    assert grown[LEAK] > 0 and grown.get(CHURN, 0) == 0, grown


def test_report_html_in_the_output_directory_and_of_a_diff(leaky_out):
    cli, out, _ = leaky_out
    dom, console = dump_dom(out / "report.html")
    assert console == []
    page = Page(dom)
    assert any(b["text"].startswith(f"{LEAK} (leaky.c:") for b in page.boxes), page.box_names()
    assert LEAK in page.tables["leaks"] and CACHE not in page.tables["leaks"]
    assert LEAK in page.tables["sites"] and page.svgs >= 2  # the growth chart, a sparkline
    html = out.parent / "diff.html"
    result = cli.run("diff", out, "--html", html)
    assert result.returncode == 0 and result.stdout == f"Wrote {html}\n", result.stderr
    dom, console = dump_dom(html)
    assert console == [] and LEAK in Page(dom).tables["diff"]


def test_growth_freed_at_exit_is_still_growth_and_fails_check(freed_out):
    cli, out, exit_dump = freed_out
    failed = cli.run("check", out, "--max-growth", "512k")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    leak = [line for line in failed.stdout.splitlines() if line.startswith(f"FAIL: {LEAK} (")]
    assert leak and "from dump 0 to dump " in leak[0] and "at exit" not in leak[0], failed.stdout
    within = cli.run("diff", out)
    assert within.returncode == 0, within.stderr
    total = within.stdout.splitlines()[1]
    assert total.startswith("bytes in use from dump 0 to dump ") and ": +" in total, total
    assert LEAK in within.stdout.splitlines()[3], within.stdout
    # Asked for by number, the dump at exit shows what the teardown freed.
    freed = cli.run("diff", out, "--from", exit_dump - 1, "--to", exit_dump)
    assert freed.returncode == 0, freed.stderr
    assert freed.stdout.splitlines()[1].startswith(
        f"bytes in use from dump {exit_dump - 1} to dump {exit_dump} (at exit): -"), freed.stdout


def test_check_exits_2_when_it_has_nothing_to_judge(freed_out):
    cli, out, exit_dump = freed_out
    for args, said in ((["check", out.parent / "missing", "--max-growth", "1M"], "does not exist"),
                       (["check", out, "--max-growth", "1M", "--to", exit_dump + 1],
                        f"has no dump {exit_dump + 1} (")):
        result = cli.run(*args)
        assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
        assert result.stderr.startswith("droidheap: ") and said in result.stderr, result.stderr
        assert len(result.stderr.splitlines()) == 1, result.stderr
