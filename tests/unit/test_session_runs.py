"""How run_attached reports what connects, with a session and a device that are stand-ins: every
process profiled from its start is said to be so, also one that connected while droidheap was
still waiting for the processes it signalled (it may beat them: a signalled process under
qemu-user or on a busy phone takes seconds). And how a spawned program's descendants that never
connected are named at the end."""
from droidheap.session_runs import Targets, _say_which_descendants_did_not_connect, run_attached

SIGNALLED, STARTED = 100, 200


class _Device:
    def cpu_ticks(self, pid):
        return None

    def enable_at_start(self, name):
        pass

    def disable_at_start(self, name):
        pass

    def pidof(self, name):
        return [SIGNALLED, STARTED]

    def app_name(self, pid):
        return ""


class _Session:
    """Both processes record by the time the signalled one is waited for; the session ends after
    a few polls."""

    def __init__(self):
        self.polls = 0

    def start(self, **kwargs):
        pass

    def wait_until(self, condition, timeout_s):
        return condition()

    def recording_pids(self):
        return {SIGNALLED, STARTED}

    def connected_pids(self):
        return {SIGNALLED, STARTED}

    def running(self):
        self.polls += 1
        return self.polls < 3

    def stop(self):
        pass


def test_a_process_started_while_the_signalled_ones_were_awaited_is_announced():
    notes = []
    targets = Targets(names=["prog"], pids=[], every_process=False, running=True, startup=True)
    run_attached(_Device(), _Session(), [SIGNALLED], targets, 0, notes.append)
    assert f"attached to pid {SIGNALLED}" in notes, notes
    assert f"profiling pid {STARTED} from its start" in notes, notes
    assert sum("pid 200" in n for n in notes) == 1, notes


class _LongTree:
    """A spawned program whose descendants ran ten programs that never connected, and more than
    droidheapd listed."""

    def unconnected_descendants(self):
        return [(300 + i, f"/usr/bin/tool{i} --flag " + "x" * 80) for i in range(10)], 5

    def why_descendants_did_not_connect(self, name):
        return "statically linked, or no allocation"


def test_the_programs_that_never_connected_are_named_shortly_and_counted():
    notes = []
    tree = _LongTree()
    _say_which_descendants_did_not_connect(tree, tree, "sh", notes.append)
    [note] = notes
    assert note.startswith("warning: 15 programs that sh ran never connected (statically linked, "
                           "or no allocation): pid 300 (tool0 --flag xxx"), note
    assert "pid 307 (tool7" in note and "pid 308" not in note, note
    assert note.endswith("...) and 7 more"), note


def test_nothing_is_said_when_every_program_connected():
    class _AllConnected:
        def unconnected_descendants(self):
            return [], 0

    notes = []
    _say_which_descendants_did_not_connect(None, _AllConnected(), "sh", notes.append)
    assert notes == []
