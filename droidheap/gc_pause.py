"""Reading and converting a trace makes millions of small objects (a sample per call stack of every
dump, frames, locations) that hold no cycles. Python's cyclic collector, triggered by allocation
counts, would walk them all again and again as they accumulate: half the time of a large
conversion. The work that builds them runs with it paused; it resumes afterwards, and what little
cyclic garbage there is goes at its next run."""
import contextlib
import functools
import gc


def gc_paused(function):
    """`function`, run with the cyclic collector paused (as it was, after)."""
    @functools.wraps(function)
    def run(*args, **kwargs):
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()
    return run


@contextlib.contextmanager
def collected_apart():
    """A block whose collections (gc.collect) leave out every object made before it: those of a
    conversion's dumps, hundreds of thousands that hold no cycles, would cost more to walk than
    what the block made."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
