"""report.html: self-contained (no network), safe against any function name, and, loaded in
headless Chromium, without console messages and showing what the data says for each state the
URL can name (profile, metric, search, zoom), the unreachable call sites of a swept dump among
them."""
import json
import re

import pytest

from droidheap.errors import DroidheapError
from droidheap.results.html import render_html, write_html
from tests.chromium import Page, dump_dom, screenshot

HOSTILE = "</script><b>x</b>"


FRAMES = [
    {"function": "main", "where": "app.c:40", "module": "/data/app"},
    {"function": "site_keep", "where": "app.c:10", "module": "/data/app"},
    {"function": "site_churn", "where": "app.c:20", "module": "/data/app"},
    {"function": "operator new(unsigned long)", "where": "", "module": "/lib/libstdc++.so.6"},
    {"function": HOSTILE, "where": "evil.cc:1", "module": "/data/app"},
    {"function": "operator<<(std::ostream&, int)", "where": "", "module": "/data/app"},
]


def _profile(dump, keep, churn=131072, time_s=None, pid=42):
    return {"pid": pid, "cmdline": "/data/app --x", "heap": "libc.malloc", "dump": dump,
            "time_s": time_s, "at_peak": False, "sampling_interval": 4096,
            "totals": {"alloc_count": 10, "alloc_bytes": 100, "free_count": 1, "free_bytes": 10,
                       "live_blocks": 9, "in_use_bytes": 90},
            "notes": [], "samples": [  # [stack (STACKS), site, figures]
                [0, 1, keep // 4096, keep, keep // 4096, keep],
                [1, 2, 10, churn, 0, 0],  # allocates, keeps nothing
                [2, 4, 1, 4096, 1, 4096]]}


STACKS = [[3, 1, 0], [2, 0], [4, 5, 0]]  # frame ids, leaf first


def _data(**overrides):
    data = {"version": 2, "title": "droidheap: app <test>", "frames": FRAMES, "stacks": STACKS,
            "profiles": [_profile(0, 8192, time_s=0.0), _profile(1, 65536, time_s=1.0)],
            "growth": [{"label": "pid 42 (app), libc.malloc",
                        "points": [[0.0, 12288, 53248], [1.0, 69632, 110592]]}],
            "leaks": [{"label": "pid 42, heap libc.malloc", "frame": 1, "growth_bytes": 57344,
                       "steadiness": 1.0, "in_use_by_dump": [8192, 65536]}],
            "diff": None}
    data.update(overrides)
    return data


@pytest.fixture
def page(tmp_path):
    def load(data=None, hash_=""):
        path = tmp_path / "report.html"
        write_html(_data() if data is None else data, path)
        dom, console = dump_dom(path, hash_)
        assert console == [], console
        assert 'id="errors"></div>' in dom, dom[dom.find('id="errors"'):][:300]
        return Page(dom)
    return load


def test_the_page_needs_nothing_from_the_network():
    text = render_html(_data())
    for reference in ("http://", "https://", "<link", "src=", "url(", "fetch(", "XMLHttpRequest",
                      "import(", "@import", "WebSocket"):
        assert reference not in text, reference
    # The data cannot end its script element early, whatever a function is named.
    assert HOSTILE not in text and text.count("</script>") == 2
    assert "<title>droidheap: app &lt;test&gt;</title>" in text


def test_the_data_is_inlined_as_script_safe_json():
    text = render_html(_data())
    inline = re.search(r'<script type="application/json" id="droidheap-data">(.*?)</script>',
                       text, re.S)[1]
    assert not set("<>&") & set(inline)
    assert "\\u003c/script\\u003e" in inline and "operator\\u003c\\u003c" in inline
    assert json.loads(inline) == _data()  # still the same JSON to the page's JSON.parse


def test_an_unwritable_path_is_a_droidheap_error(tmp_path):
    with pytest.raises(DroidheapError, match=r"^cannot write .*missing/report\.html: No such file"):
        write_html(_data(), tmp_path / "missing" / "report.html")


def test_chromium_reports_console_errors_and_uncaught_exceptions(tmp_path):
    """The "no console errors" checks below would pass vacuously if the helper missed them."""
    path = tmp_path / "bad.html"
    path.write_text("<!DOCTYPE html><script>console.error('first\\nsecond');"
                    "Promise.reject(new Error('rejected'));"
                    "throw new Error('thrown')</script>")
    _, console = dump_dom(path)
    assert any(m.startswith("first\nsecond") for m in console), console
    assert any("Uncaught Error: thrown" in m for m in console), console
    assert any("Uncaught (in promise) Error: rejected" in m for m in console), console


def test_default_view_is_the_last_dump_by_bytes_in_use(page):
    p = page()
    names = p.box_names()
    assert "site_keep (app.c:10)" in names and "main (app.c:40)" in names
    assert HOSTILE + " (evil.cc:1)" in names  # text, not markup
    assert "site_churn (app.c:20)" not in names  # it keeps nothing
    root = next(b for b in p.boxes if "root" in b["classes"])
    assert root["text"] == "all: 68.0 KiB" and root["width"] == 100
    assert "site_keep" in p.tables["sites"] and "64.0 KiB" in p.tables["sites"]
    assert HOSTILE in p.tables["sites"]


def test_allocated_bytes_show_what_was_freed_again(page):
    p = page(hash_="metric=alloc_bytes")
    assert "site_churn (app.c:20)" in p.box_names()
    assert p.tables["sites"].index("site_churn") < p.tables["sites"].index("site_keep")


def test_a_chosen_dump_and_search(page):
    p = page(hash_="profile=0&search=KEEP")
    root = next(b for b in p.boxes if "root" in b["classes"])
    assert root["text"] == "all: 12.0 KiB"  # dump 0: 8 KiB kept + 4 KiB
    matched = [b["text"] for b in p.boxes if "match" in b["classes"]]
    assert matched == ["site_keep (app.c:10)"]


def test_search_reports_the_matched_share(tmp_path):
    path = tmp_path / "report.html"
    write_html(_data(), path)
    dom, console = dump_dom(path, "search=site_keep")
    assert console == []
    assert re.search(r'id="matched">matched: 64\.0 KiB \(94\.1%\)<', dom), dom[:2000]


def test_zoom_shows_the_frame_at_full_width_with_its_callers_above(page):
    p = page(hash_="zoom=0,5")  # main, then operator<<
    crumbs = [b for b in p.boxes if "crumb" in b["classes"]]
    assert [b["text"] for b in crumbs] == ["main (app.c:40)", "operator<<(std::ostream&, int)"]
    assert all(b["width"] == 100 for b in crumbs)
    below = [b for b in p.boxes if not set(b["classes"]) & {"crumb", "root"}]
    assert [b["text"] for b in below] == [HOSTILE + " (evil.cc:1)"] and below[0]["width"] == 100
    assert all(b["style_width"] == 100 for b in crumbs + below)  # what the browser draws
    assert [b["top"] for b in crumbs + below] == sorted({b["top"] for b in crumbs + below})


def test_a_zoom_path_that_no_longer_exists_stops_where_it_does(page):
    p = page(hash_="zoom=0,2,99")  # main exists; site_churn keeps nothing; 99 is no frame
    assert [b["text"] for b in p.boxes if "crumb" in b["classes"]] == ["main (app.c:40)"]


def test_the_default_is_the_last_dump_of_the_first_process_and_heap(page):
    data = _data(profiles=[_profile(0, 8192), _profile(1, 65536), _profile(0, 4096, pid=7)])
    p = page(data)
    root = next(b for b in p.boxes if "root" in b["classes"])
    assert root["text"] == "all: 68.0 KiB"  # dump 1 of pid 42; pid 7 has 8 KiB
    assert p.texts["total"] == "Total in use (bytes): 68.0 KiB"


def _freed(pid=42, held=0):
    """A last dump of a program that freed all it sampled; `held`: bytes it still holds
    (exact, in blocks of 10) none of which were sampled."""
    return dict(_profile(1, 0, pid=pid), samples=[[0, 1, 2, 8192, 0, 0], [1, 2, 10, 131072, 0, 0]],
                totals={"alloc_count": 20, "alloc_bytes": 200000, "free_count": 20 - held // 10,
                        "free_bytes": 200000 - held, "live_blocks": held // 10,
                        "in_use_bytes": held})


def test_a_dump_with_nothing_in_use_opens_on_bytes_allocated(page):
    p = page(_data(profiles=[_profile(0, 8192), _freed()]))
    assert p.texts["total"] == "Total allocated (bytes): 136.0 KiB"
    assert {"site_keep (app.c:10)", "site_churn (app.c:20)"} <= p.box_names()
    assert "site_churn" in p.tables["sites"]
    # Where the dump chosen has something in use, that is what opens.
    assert page(_data(), "profile=0").texts["total"] == "Total in use (bytes): 12.0 KiB"


def test_an_empty_view_says_why_it_is_empty(page):
    freed = "Nothing sampled is in use at this dump: the program freed what it allocated."
    p = page(_data(profiles=[_freed()]), "metric=in_use_bytes")
    assert p.texts["flame"].startswith(freed) and freed in p.tables["sites"]
    assert not p.boxes
    held = page(_data(profiles=[_freed(held=90)]), "metric=in_use_count")
    assert held.texts["flame"].startswith(
        "Nothing sampled is in use at this dump: the sampled allocations were all freed; what the "
        "program still holds (exact: 90 B in 9 blocks) was not sampled."), held.texts["flame"]
    nothing = page(_data(profiles=[dict(_profile(0, 0), samples=[])]))
    assert nothing.texts["flame"].startswith("Nothing was sampled in this dump: the process "
                                             "allocated nothing while profiled, or too little")


def test_the_default_is_the_first_process_whose_last_dump_sampled_anything(page):
    shell = dict(_profile(0, 0, pid=7), samples=[])  # started the program, allocated nothing
    p = page(_data(profiles=[shell, _profile(0, 8192), _profile(1, 65536)]))
    assert p.texts["total"] == "Total in use (bytes): 68.0 KiB"


def test_the_default_is_the_last_dump_taken_while_running_not_the_one_at_exit(page):
    at_exit = dict(_freed(), dump=2, at_exit=True)  # the teardown freed it all
    p = page(_data(profiles=[_profile(0, 8192), _profile(1, 65536), at_exit]))
    assert p.texts["total"] == "Total in use (bytes): 68.0 KiB"
    assert p.texts["profile"].endswith("pid 42 (app), heap libc.malloc, dump 2 (at exit)")
    # Still there to choose; and, the only dump (no -c), what opens.
    assert page(_data(profiles=[_profile(0, 8192), at_exit]), "profile=1").texts["total"] == \
        "Total allocated (bytes): 136.0 KiB"
    assert page(_data(profiles=[at_exit])).texts["total"] == "Total allocated (bytes): 136.0 KiB"


def test_the_profile_menu_names_which_dump_of_how_many_and_when(page):
    data = _data(profiles=[dict(_profile(0, 8192, time_s=0.0), dumps=2),
                           dict(_profile(1, 65536, time_s=1.5), dumps=2),
                           dict(_profile(0, 4096, pid=7, time_s=0.0), dumps=1)])
    assert page(data).texts["profile"] == (
        "pid 42 (app), heap libc.malloc, dump 0 of 2"
        "pid 42 (app), heap libc.malloc, dump 1 of 2, 1.5 s after the first"
        "pid 7 (app), heap libc.malloc, one dump")


def test_a_dump_at_the_peak_offers_only_what_is_in_use(tmp_path):
    peak = dict(_profile(0, 8192), at_peak=True)
    peak["samples"] = [[stack, site, 0, 0, count, size]
                       for stack, site, _, _, count, size in peak["samples"]]
    path = tmp_path / "report.html"
    write_html(_data(profiles=[peak]), path)
    dom, console = dump_dom(path, "metric=alloc_bytes")
    assert console == []
    disabled = re.findall(r'<input type="radio" name="metric" value="(\w+)"[^>]*disabled', dom)
    assert sorted(disabled) == ["alloc_bytes", "alloc_count"]
    p = Page(dom)
    assert next(b for b in p.boxes if "root" in b["classes"])["text"] == "all: 12.0 KiB"


EXACT = "44.0 KiB in 11 blocks, every block known (exact)"


def _swept(profile, verdict=EXACT, samples=([0, 1, 0, 0, 10, 40960], [2, 4, 0, 0, 1, 4096]),
           swept=True):
    """`profile` with its dump's sweep: by default 40 KiB unreachable on site_keep's stack and
    4 KiB on the hostile one's."""
    return dict(profile, unreachable={"swept": swept, "verdict": verdict, "notes": [],
                                      "samples": [list(row) for row in samples]})


def test_the_summary_says_which_sizes_each_figure_counts(page):
    """libc's samples count requested sizes and its exact totals usable ones: each says so."""
    libc = page(_data()).texts["summary"]
    assert "sampled, requested sizes: 196.0 KiB allocated" in libc, libc
    assert "exact, usable sizes: 10 allocations" in libc, libc
    pool = page(_data(profiles=[dict(_profile(0, 8192), heap="pool")])).texts["summary"]
    assert "sampled: " in pool and "exact: 10 allocations" in pool, pool


def test_the_unreachable_view_shows_the_sweeps_call_sites(page):
    p = page(_data(profiles=[_profile(0, 8192), _swept(_profile(1, 65536))]),
             "metric=unreachable_bytes")
    assert p.texts["total"] == "Total unreachable (bytes): 44.0 KiB"
    assert f"unreachable (leaked): {EXACT}" in p.texts["summary"]
    root = next(b for b in p.boxes if "root" in b["classes"])
    assert root["text"] == "all: 44.0 KiB"
    assert {"site_keep (app.c:10)", HOSTILE + " (evil.cc:1)"} <= p.box_names()
    sites = p.tables["sites"]
    assert sites.startswith("call site module unreachable unreachable objects allocated"), sites
    assert sites.index("site_keep") < sites.index("40.0 KiB") < sites.index(HOSTILE)
    # The verdict is on every view of the dump.
    assert f"unreachable (leaked): {EXACT}" in page(
        _data(profiles=[_swept(_profile(1, 65536))])).texts["summary"]


def test_a_dump_not_swept_offers_no_unreachable_view(tmp_path):
    path = tmp_path / "report.html"
    write_html(_data(profiles=[_profile(0, 8192), _swept(_profile(1, 65536))]), path)
    dom, console = dump_dom(path, "profile=0&metric=unreachable_bytes")
    assert console == []
    disabled = re.findall(r'<input type="radio" name="metric" value="(\w+)"[^>]*disabled', dom)
    assert sorted(disabled) == ["unreachable_bytes", "unreachable_count"]
    assert Page(dom).texts["total"] == "Total in use (bytes): 12.0 KiB"


def test_a_sweep_that_found_nothing_says_so(page):
    verdict = "none of 40 sampled blocks (blocks not sampled were not judged)"
    p = page(_data(profiles=[_swept(_profile(1, 65536), verdict, samples=())]),
             "metric=unreachable_count")
    assert p.texts["flame"] == f"Unreachable (leaked): {verdict}." and not p.boxes
    assert verdict in p.tables["sites"]


def test_a_page_without_sweeps_has_no_unreachable_metric(tmp_path):
    path = tmp_path / "report.html"
    write_html(_data(), path)
    dom, console = dump_dom(path, "metric=unreachable_bytes")
    assert console == [] and 'value="unreachable_bytes"' not in dom
    assert Page(dom).texts["total"] == "Total in use (bytes): 68.0 KiB"


def test_the_data_of_a_swept_profile_shows_its_unreachable_sites(page):
    from droidheap.results.model import Location, Profile, StackSample, Unreachable
    from droidheap.results.page import page_data
    from droidheap.results.sites import CallStack
    stack = CallStack([Location("lost", "app.c", 3, "/data/app"), Location("main", "app.c", 9)])
    sweep = Unreachable([StackSample(stack, 0, 0, 3, 4000)], blocks_swept=40, blocks=3,
                        bytes=4000, note="registers not read")
    profile = Profile(pid=7, cmdline="app", heap="libc.malloc", dump_index=0, timestamp_ns=0,
                      sampling_interval_bytes=4096, samples=[StackSample(stack, 4, 5000, 3, 4000)],
                      unreachable=sweep)
    p = page(page_data([profile], "t"), "metric=unreachable_bytes")
    assert p.box_names() == {"all: 3.9 KiB", "main (app.c:9)", "lost (app.c:3)"}
    assert ("unreachable (leaked): ~3.9 KiB estimated from 3 of 40 sampled blocks (blocks not "
            "sampled were not judged); registers not read") in p.texts["summary"]


def test_growth_chart_leaks_and_diff(page):
    p = page()
    assert p.svg_in.get("growth") == 1 and "growth-section" not in p.hidden
    assert p.svg_in.get("leaks") == 1  # the sparkline
    assert "leaks-section" not in p.hidden
    assert "site_keep" in p.tables["leaks"] and "+56.0 KiB" in p.tables["leaks"]
    assert "diff-section" in p.hidden
    diff = {"base": "run A", "current": "run B", "sites": [
        {"frame": 1, "base_in_use": 8192, "in_use": 65536, "in_use_delta": 57344,
         "alloc_delta": 57344, "count_delta": 14}]}
    p = page(_data(diff=diff, growth=[], leaks=[]))
    assert "diff-section" not in p.hidden and "+56.0 KiB" in p.tables["diff"]
    assert {"growth-section", "leaks-section"} <= p.hidden
    assert p.texts["diff-title"] == "Growth between run A and run B"
    # One point is no line: no chart.
    p = page(_data(growth=[{"label": "pid 42", "points": [[0.0, 1, 1]]}]))
    assert "growth-section" in p.hidden and not p.svg_in.get("growth")


def test_no_dumps_says_so(tmp_path):
    path = tmp_path / "report.html"
    write_html(_data(profiles=[], growth=[], leaks=[], frames=[]), path)
    dom, console = dump_dom(path)
    assert console == [] and "No heap dumps." in dom
    assert Page(dom).boxes == [] and "sites-section" in Page(dom).hidden


def test_a_screenshot_shows_the_page(tmp_path):
    path = tmp_path / "report.html"
    write_html(_data(), path)
    png = tmp_path / "report.png"
    assert screenshot(path, png, "search=site", size=(900, 700)) == []
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10000


def test_a_failing_script_says_so_on_the_page(tmp_path):
    path = tmp_path / "report.html"
    text = render_html(_data())
    path.write_text(re.sub(r'(id="droidheap-data">).*?(</script>)', r"\1{not json\2", text,
                           flags=re.S))
    dom, console = dump_dom(path)
    assert any("SyntaxError" in m for m in console), console
    assert re.search(r'id="errors">error: [^<]*JSON', dom), dom[dom.find('id="errors"'):][:300]
