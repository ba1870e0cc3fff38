"""Ctrl-C and SIGTERM while a session runs (commands/profile.py), taken where the session waits.

Python raises a signal's KeyboardInterrupt wherever the main thread happens to be: inside
subprocess's Popen.poll() between its taking the waitpid lock and the `try` that gives it back
(the lock then stays taken, and every later poll() and wait() of the daemon says it still runs: a
session stopped by Ctrl-C waited out its 120 s stop timeout, in a CI run), or halfway through an
adb stream's message. A stop signal is therefore raised only from `sleep`, where the session
waits; one that comes elsewhere is raised at the next such sleep. A second one before that is
raised at once: a user whose Ctrl-C seems to do nothing (a device that stopped answering) still
gets out.
"""
import signal
import time
from typing import Optional

_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}
_installed: Optional["StopSignals"] = None


class StopSignals:
    """Installed in the main thread for the time of a session (a context manager): Ctrl-C and
    SIGTERM each stop it, as KeyboardInterrupt raised from `sleep`, and the first is remembered. A
    program droidheap started and then stopped for it is said to be, and droidheap exits as a
    shell says a program ended by that signal (130 after Ctrl-C), as `time` and strace do."""

    def __init__(self):
        self.received: Optional[int] = None
        self._pending = False  # a stop signal not raised yet
        self._sleeping = False
        self._previous = {}

    def __enter__(self) -> "StopSignals":
        global _installed
        for signum in _NAMES:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        _installed = self
        return self

    def __exit__(self, *exc_info) -> None:
        global _installed
        _installed = None
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum, frame):
        if self.received is None:
            self.received = signum
        if self._sleeping or self._pending:
            self._sleeping = self._pending = False
            raise KeyboardInterrupt
        self._pending = True

    def sleep(self, seconds: float) -> None:
        """time.sleep, but a stop signal, come now or since the last sleep, raises
        KeyboardInterrupt."""
        self._sleeping = True  # from here a signal raises at once
        try:
            if self._pending:
                self._pending = False
                raise KeyboardInterrupt
            time.sleep(seconds)
        finally:
            self._sleeping = False

    @property
    def name(self) -> str:
        """What stopped the session ("Ctrl-C", "SIGTERM"); "" while nothing has."""
        return _NAMES.get(self.received, "")

    @property
    def exit_status(self) -> Optional[int]:
        """droidheap's exit status once a signal stopped the session, else None."""
        return None if self.received is None else 128 + self.received


def sleep(seconds: float) -> None:
    """time.sleep for the session's waits: while StopSignals is installed, where its stop
    signals are raised."""
    if _installed is None:
        time.sleep(seconds)
    else:
        _installed.sleep(seconds)
