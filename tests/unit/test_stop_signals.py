"""Ctrl-C and SIGTERM during a session (droidheap/stop_signals.py): raised where the session
sleeps, never in the middle of what it was doing."""
import os
import random
import signal
import subprocess
import threading
import time

import pytest

from droidheap import stop_signals
from droidheap.stop_signals import StopSignals


def _signal_soon(signum: int, delay_s: float) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(delay_s), os.kill(os.getpid(), signum)))
    thread.start()
    return thread


def test_a_signal_outside_a_sleep_is_raised_at_the_next_one():
    with StopSignals() as stops:
        os.kill(os.getpid(), signal.SIGINT)
        busy = sum(range(10000))  # the handler has run by now, and raised nothing
        assert stops.name == "Ctrl-C" and stops.exit_status == 130 and busy
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            stop_signals.sleep(30)
        assert time.monotonic() - started < 5
        stop_signals.sleep(0.01)  # raised once


def test_a_signal_during_a_sleep_ends_it():
    with StopSignals() as stops:
        thread = _signal_soon(signal.SIGTERM, 0.1)
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            stop_signals.sleep(30)
        thread.join()
        assert time.monotonic() - started < 5
        assert stops.name == "SIGTERM" and stops.exit_status == 143


def test_a_second_signal_before_a_sleep_is_raised_at_once():
    with StopSignals() as stops:
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(10000))
    assert stops.name == "Ctrl-C"  # the first


def test_the_handlers_before_are_back_after_the_session():
    before = signal.getsignal(signal.SIGINT)
    with StopSignals():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before
    stop_signals.sleep(0.01)  # a plain sleep again


def test_a_process_polled_when_the_signal_comes_can_still_be_waited_for():
    """Raised inside Popen.poll(), between its taking the waitpid lock and the `try` that gives it
    back, KeyboardInterrupt left the lock taken, and the daemon's every later wait said it ran (in
    14 rounds of 1000 of this loop, on the old handler that raised anywhere)."""
    process = subprocess.Popen(["sleep", "60"])
    # The timer's signal comes at any moment, as a terminal's does: passed on as Ctrl-C.
    forwarding = signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    try:
        with StopSignals():
            for _ in range(600):
                signal.setitimer(signal.ITIMER_REAL, random.uniform(0.0001, 0.002))
                with pytest.raises(KeyboardInterrupt):
                    while True:
                        process.poll()
                        stop_signals.sleep(0)
                assert not process._waitpid_lock.locked()
    finally:
        signal.signal(signal.SIGALRM, forwarding)
        process.kill()
        assert process.wait(timeout=10) == -signal.SIGKILL
