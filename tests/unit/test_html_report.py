"""report.html: self-contained (no network), safe against any function name, and, loaded in
headless Chromium, without console messages and showing what the data says for each state the
URL can name (profile, metric, search, zoom)."""
import re

import pytest

from droidheap.results.html import render_html, write_html
from tests.chromium import Page, dump_dom

HOSTILE = "</script><b>x</b>"


FRAMES = [
    {"function": "main", "where": "app.c:40", "module": "/data/app"},
    {"function": "site_keep", "where": "app.c:10", "module": "/data/app"},
    {"function": "site_churn", "where": "app.c:20", "module": "/data/app"},
    {"function": "operator new(unsigned long)", "where": "", "module": "/lib/libstdc++.so.6"},
    {"function": HOSTILE, "where": "evil.cc:1", "module": "/data/app"},
    {"function": "operator<<(std::ostream&, int)", "where": "", "module": "/data/app"},
]


def _profile(dump, keep, churn=131072, time_s=None):
    return {"pid": 42, "cmdline": "/data/app --x", "heap": "libc.malloc", "dump": dump,
            "time_s": time_s, "at_peak": False, "sampling_interval": 4096,
            "totals": {"alloc_count": 10, "alloc_bytes": 100, "free_count": 1, "free_bytes": 10,
                       "live_blocks": 9, "in_use_bytes": 90},
            "notes": [], "samples": [
                [[3, 1, 0], 1, keep // 4096, keep, keep // 4096, keep],
                [[2, 0], 2, 10, churn, 0, 0],  # allocates, keeps nothing
                [[4, 5, 0], 4, 1, 4096, 1, 4096]]}


def _data(**overrides):
    data = {"version": 1, "title": "droidheap: app <test>", "frames": FRAMES,
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
    for reference in ("<link", " src=", "url(", "fetch(", "XMLHttpRequest", "import(", "@import"):
        assert reference not in text, reference
    # The data cannot end its script element early, whatever a function is named.
    assert HOSTILE not in text and text.count("</script>") == 2
    assert "<title>droidheap: app &lt;test&gt;</title>" in text


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


def test_growth_chart_leaks_and_diff(page):
    p = page()
    assert p.svgs >= 2 and "growth-section" not in p.hidden  # the chart and a sparkline
    assert "site_keep" in p.tables["leaks"] and "+56.0 KiB" in p.tables["leaks"]
    assert "diff-section" in p.hidden
    diff = {"base": "run A", "current": "run B", "sites": [
        {"frame": 1, "base_in_use": 8192, "in_use": 65536, "in_use_delta": 57344,
         "alloc_delta": 57344, "count_delta": 14}]}
    p = page(_data(diff=diff, growth=[], leaks=[]))
    assert "diff-section" not in p.hidden and "+56.0 KiB" in p.tables["diff"]
    assert {"growth-section", "leaks-section"} <= p.hidden


def test_no_dumps_says_so(tmp_path):
    path = tmp_path / "report.html"
    write_html(_data(profiles=[], growth=[], leaks=[], frames=[]), path)
    dom, console = dump_dom(path)
    assert console == [] and "No heap dumps." in dom
    assert Page(dom).boxes == [] and "sites-section" in Page(dom).hidden
