"""Progress bars for the steps a person waits on (pulling the trace, symbolizing, writing the
outputs), drawn only where one watches: on stderr, with droidheap's other lines, when it is a terminal. In
a pipe, a log or CI nothing is drawn, so the output stays what scripts read."""
import contextlib
import sys
from typing import Iterator

from droidheap.terminal import printable, unescaped


class _Unseen:
    def update(self, steps: int) -> None:
        pass


def watched() -> bool:
    """Whether a bar would be drawn: worth a question to the device about a length."""
    return sys.stderr.isatty()


@contextlib.contextmanager
def progress_bar(label: str, length: int) -> Iterator:
    """A bar of `length` steps advanced by `.update(steps)`; none when `length` is 0."""
    if length <= 0 or not watched():
        yield _Unseen()
        return
    import click
    with click.progressbar(length=length, label=printable(label), file=unescaped(sys.stderr),
                           width=30) as bar:
        yield bar
