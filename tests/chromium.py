"""Headless Chromium (Debian `chromium`) as the judge of report.html: the DOM after the page's
script ran, what it said on its console, and screenshots to look at.

Chromium logs every console message the same way (`INFO:CONSOLE ... "text", source: ...`),
errors and uncaught exceptions among them; the report page logs nothing when all is well, so any
console line counts as a complaint."""
import html.parser
import pathlib
import re
import shutil
import subprocess
import tempfile
from typing import List, Tuple

from tests.requirements import require

_CONSOLE = re.compile(r':CONSOLE[^\]]*\] "(.*)", source: (.*)$')


def _binary() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    require(None if found else "chromium is not installed (scripts/install installs it)")
    return found


def _run(html: pathlib.Path, hash_: str, *flags: str) -> Tuple[str, List[str]]:
    with tempfile.TemporaryDirectory() as profile:
        url = pathlib.Path(html).resolve().as_uri() + (f"#{hash_}" if hash_ else "")
        result = subprocess.run(
            [_binary(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}",
             "--virtual-time-budget=5000", *flags, url],
            capture_output=True, text=True, timeout=120)
    console = [f"{m[1]} ({m[2]})" for m in map(_CONSOLE.search, result.stderr.splitlines()) if m]
    return result.stdout, console


def dump_dom(html: pathlib.Path, hash_: str = "") -> Tuple[str, List[str]]:
    """(the DOM once the page settled, its console messages)."""
    return _run(html, hash_, "--dump-dom")


def screenshot(html: pathlib.Path, png: pathlib.Path, hash_: str = "",
               size: Tuple[int, int] = (1400, 1000)) -> List[str]:
    _, console = _run(html, hash_, f"--screenshot={png}", f"--window-size={size[0]},{size[1]}",
                      "--hide-scrollbars")
    return console


class Page(html.parser.HTMLParser):
    """The flamegraph's boxes and the text of the tables, from the DOM Chromium dumped."""

    def __init__(self, dom: str):
        super().__init__()
        self.boxes = []  # {frame, width, classes, text}
        self.tables = {}  # id -> text
        self.ids = set()
        self.hidden = set()
        self.svgs = 0
        self._box = None
        self._table = None
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
            if "hidden" in attrs:
                self.hidden.add(attrs["id"])
        if tag == "svg":
            self.svgs += 1
        if "frame" in (attrs.get("class") or "").split() and tag == "div":
            top = re.search(r"top:\s*(\d+)px", attrs.get("style") or "")
            self._box = {"frame": int(attrs["data-frame"]), "width": float(attrs["data-width"]),
                         "top": int(top[1]) if top else 0, "classes": attrs["class"].split(),
                         "text": ""}
            self.boxes.append(self._box)
        if tag == "table":
            self._table = attrs.get("id")
            self.tables[self._table] = ""

    def handle_endtag(self, tag):
        if tag == "div":
            self._box = None
        if tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._box is not None:
            self._box["text"] += data
        if self._table is not None:
            self.tables[self._table] += data + " "

    def box_names(self):
        return {b["text"] for b in self.boxes}
