"""Headless Chromium (Debian `chromium`) as the judge of report.html: the DOM after the page's
script ran, what it said on its console, and screenshots to look at.

What Chromium prints for a page's console (seen with Chromium 156, `--enable-logging=stderr
--v=0`): every message, whatever its level, as

    [pid:tid:time:INFO:CONSOLE:LINE] "TEXT", source: URL (LINE)

with TEXT running over several stderr lines when the message holds newlines. `console.error`,
`console.log` and `console.warn` look the same; an uncaught exception is TEXT
"Uncaught Error: ..." and an unhandled rejection "Uncaught (in promise) ...". As the level cannot
be told apart, and the report page logs nothing when all is well, every console message counts
as a complaint."""
import html.parser
import pathlib
import re
import shutil
import subprocess
import tempfile
from typing import List, Optional, Tuple

from tests.requirements import require

TIMEOUT_S = 60
_CONSOLE_START = re.compile(r'^\[[^\]]*:CONSOLE[^\]]*\] "(.*)$')
_CONSOLE_END = re.compile(r'^(.*)", source: (.*)$')
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
         "track", "wbr"}


def _binary() -> str:
    found: Optional[str] = "/usr/bin/chromium" if pathlib.Path("/usr/bin/chromium").exists() \
        else shutil.which("chromium")
    require(None if found else "chromium is not installed (scripts/install_test_tools installs it)")
    return found


def console_messages(stderr: str) -> List[str]:
    """The page's console messages in Chromium's log, each as "TEXT (source: URL (LINE))"."""
    messages, current = [], None
    for line in stderr.splitlines():
        if current is None:
            start = _CONSOLE_START.match(line)
            if not start:
                continue
            current, line = [], start[1]
        end = _CONSOLE_END.match(line)
        if end:
            current.append(end[1])
            messages.append("\n".join(current) + f" (source: {end[2]})")
            current = None
        else:
            current.append(line)
    if current is not None:  # cut off: still worth reporting
        messages.append("\n".join(current))
    return messages


def _run(html_path: pathlib.Path, hash: str, *flags: str) -> Tuple[str, List[str]]:
    url = pathlib.Path(html_path).resolve().as_uri() + (f"#{hash}" if hash else "")
    # A fresh profile per call: no cache, no state left by an earlier page, and no clash between
    # tests running at once.
    with tempfile.TemporaryDirectory(prefix="droidheap-chromium-") as profile:
        result = subprocess.run(
            [_binary(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}",
             "--virtual-time-budget=5000", *flags, url],
            capture_output=True, text=True, timeout=TIMEOUT_S)
    if result.returncode != 0:
        raise AssertionError(f"chromium exited with {result.returncode}:\n{result.stderr[-3000:]}")
    return result.stdout, console_messages(result.stderr)


def dump_dom(html_path: pathlib.Path, hash: str = "") -> Tuple[str, List[str]]:
    """(the DOM once the page settled, its console messages: errors and uncaught exceptions)."""
    return _run(html_path, hash, "--dump-dom")


def screenshot(html_path: pathlib.Path, png_path: pathlib.Path, hash: str = "",
               size: Tuple[int, int] = (1400, 1000)) -> List[str]:
    """Writes a PNG of the page's first `size` pixels; returns its console messages."""
    _, console = _run(html_path, hash, f"--screenshot={pathlib.Path(png_path).resolve()}",
                      f"--window-size={size[0]},{size[1]}", "--hide-scrollbars")
    if not pathlib.Path(png_path).exists():
        raise AssertionError(f"chromium wrote no screenshot to {png_path}")
    return console


class Page(html.parser.HTMLParser):
    """The flamegraph's boxes and the text of the tables, from the DOM Chromium dumped."""

    def __init__(self, dom: str):
        super().__init__()
        self.boxes = []  # {frame, width, top, classes, text}
        self.tables = {}  # id -> text
        self.ids = set()
        self.hidden = set()
        self.svgs = 0
        self.svg_in = {}  # id of an element -> how many <svg> it holds
        self.texts = {}  # id of an element -> its text
        self._open = []  # (tag, id or None) of the elements open at this point
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
            for _, element_id in self._open:
                if element_id:
                    self.svg_in[element_id] = self.svg_in.get(element_id, 0) + 1
        if tag not in _VOID:
            self._open.append((tag, attrs.get("id")))
        if "frame" in (attrs.get("class") or "").split() and tag == "div":
            top = re.search(r"top:\s*(\d+)px", attrs.get("style") or "")
            width = re.search(r"width:\s*([\d.]+)%", attrs.get("style") or "")
            self._box = {"frame": int(attrs["data-frame"]), "width": float(attrs["data-width"]),
                         "style_width": float(width[1]) if width else None,
                         "top": int(top[1]) if top else 0, "classes": attrs["class"].split(),
                         "title": attrs.get("title") or "", "text": ""}
            self.boxes.append(self._box)
        if tag == "table":
            self._table = attrs.get("id")
            self.tables[self._table] = ""

    def handle_endtag(self, tag):
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                del self._open[i:]
                break
        if tag == "div":
            self._box = None
        if tag == "table":
            self._table = None

    def handle_data(self, data):
        for _, element_id in self._open:
            if element_id:
                self.texts[element_id] = self.texts.get(element_id, "") + data
        if self._box is not None:
            self._box["text"] += data
        if self._table is not None:
            self.tables[self._table] += data + " "

    def box_names(self):
        return {b["text"] for b in self.boxes}
