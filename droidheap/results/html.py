"""report.html: one self-contained page (its script, style and data inside; no network) from the
data page.py builds. The page itself (assets/) draws the flamegraphs and tables."""
import html
import json
import pathlib
import re

from droidheap.errors import DroidheapError
from droidheap.output_files import write_output

REPORT_HTML = "report.html"
_ASSETS = pathlib.Path(__file__).parent / "assets"
_PLACEHOLDER = re.compile(r"\{\{(TITLE|CSS|JS|DATA)\}\}")
# One script of these, in order: report.js, last, starts the page once the others are defined.
_SCRIPTS = ("charts.js", "report.js")


def _script_safe_json(data: dict) -> str:
    """JSON that cannot end its <script> element early: a function named `operator<` or a path
    holding `</script>` stays text."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render_html(data: dict) -> str:
    parts = {"TITLE": html.escape(data.get("title", "droidheap")),
             "CSS": (_ASSETS / "report.css").read_text(),
             "JS": "\n".join((_ASSETS / name).read_text() for name in _SCRIPTS),
             "DATA": _script_safe_json(data)}
    # One pass: a placeholder's text inside the data is not replaced again.
    return _PLACEHOLDER.sub(lambda m: parts[m[1]], (_ASSETS / "report.html").read_text())


def write_html(data: dict, path: pathlib.Path) -> None:
    try:
        write_output(pathlib.Path(path), render_html(data))
    except OSError as e:
        raise DroidheapError(f"cannot write {path}: {e.strerror or e}") from e
