"""report, diff and check on a real run with continuous dumps (tests/programs/leaky.c): the leak
ranks first among the suspects, the one-off cache and the churn do not; check fails naming the
leak and passes where the bound or the site filter allows; diff shows the leak's growth."""
import json

import pytest

from tests.chromium import Page, dump_dom

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
    assert profile["dumps"] >= 3 and profile["exact"]["alloc_count"] >= 60 + 60 + 8
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
