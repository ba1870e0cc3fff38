"""What droidheap prints reaches a terminal, and much of it was named by someone else: symbol names
and library paths from a trace or a phone, process names, a device's error output. A terminal
obeys the control characters among them (`ESC ] 0 ; TEXT BEL` sets its title; others move the
cursor, rewrite lines or, on some terminals, answer with keystrokes), and Unicode's bidirectional
controls reorder what it shows. So everything droidheap writes to stdout and stderr passes through
`printable`, installed around the whole command by `escaped_output`; progress bars, drawn by
droidheap itself with cursor controls of its own, write to the stream underneath (`unescaped`)."""
import contextlib
import re
import sys
from typing import Iterator, TextIO

# C0 controls but tab and newline, DEL, C1 controls; Unicode's bidirectional marks, embeddings,
# overrides and isolates.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: "re.Match[str]") -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control character shown as its escape (`\\x1b`, `\\u202e`)."""
    return _UNSAFE.sub(_escape, text)


class _EscapingStream:
    """A text stream that writes `printable` text to the stream it wraps. It has no `buffer`, so
    that click writes through it rather than to the bytes underneath."""

    def __init__(self, stream: TextIO):
        self.unescaped = stream
        self.encoding = getattr(stream, "encoding", "utf-8")
        self.errors = getattr(stream, "errors", "strict")

    def write(self, text: str) -> int:
        self.unescaped.write(printable(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.unescaped.flush()

    def isatty(self) -> bool:
        return self.unescaped.isatty()

    def fileno(self) -> int:
        return self.unescaped.fileno()

    def writable(self) -> bool:
        return True


@contextlib.contextmanager
def escaped_output() -> Iterator[None]:
    """stdout and stderr escape control characters until the block ends."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (stream and _EscapingStream(stream) for stream in saved)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def unescaped(stream: TextIO) -> TextIO:
    """The terminal itself under `stream`: for what droidheap draws, never for names it prints."""
    return getattr(stream, "unescaped", stream)
