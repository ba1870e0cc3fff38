"""tests/timeline.py: where a run's wall time went, per pytest-xdist worker, and its CPU time."""
import subprocess

from tests import timeline


def test_each_worker_says_how_long_it_was_busy_when_it_finished_and_its_largest_modules(
        tmp_path, monkeypatch):
    path = tmp_path / "timeline.jsonl"
    for worker, test, start, end, cpu in (("gw0", "tests/e2e/a.py::t1", 100, 700, 50),
                                          ("gw0", "tests/e2e/a.py::t2", 700, 1000, 25),
                                          ("gw1", "tests/unit/b.py::t[x]", 100, 250, 290),
                                          ("gw1", "tests/unit/c.py::t", 250, 300, 10),
                                          ("gw1", "tests/unit/d.py::t", 300, 320, 1)):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        timeline.note(path, test, start, end, cpu)
    with open(path, "a") as cut:
        cut.write('{"worker": "gw1", "te')  # a worker that died mid-line
    assert timeline.summary(path, started=90, modules_shown=2, tests_shown=3,
                            cpu_modules_shown=2) == [
        "gw0: busy 900 s, finished 910 s after the start; largest modules: tests/e2e/a.py 900 s",
        "gw0's slowest tests: tests/e2e/a.py::t1 600 s, tests/e2e/a.py::t2 300 s",
        "gw1: busy 220 s, finished 230 s after the start; largest modules: tests/unit/b.py 150 s, "
        "tests/unit/c.py 50 s",
        "gw1's slowest tests: tests/unit/b.py::t[x] 150 s, tests/unit/c.py::t 50 s, "
        "tests/unit/d.py::t 20 s",
        "CPU time 376 s; the most: tests/unit/b.py 290 s, tests/e2e/a.py 75 s"]
    assert timeline.summary(tmp_path / "none", started=0) == []


def test_how_busy_the_cores_were_between_two_readings():
    before = timeline.cpu_times()
    assert before is not None and 0 <= before[0] <= before[1]
    assert timeline.cores_busy((100, 400), (400, 800)) == (
        "the cores were busy 75% of the run (every process on the machine)")
    assert timeline.cores_busy(None, before) == "" and timeline.cores_busy(before, before) == ""


def test_a_tests_cpu_time_counts_the_processes_it_waited_for():
    before = timeline.cpu_seconds()
    subprocess.run(["python3", "-c", "sum(range(3_000_000))"], check=True)
    assert timeline.cpu_seconds() - before > 0.02
