"""tests/timeline.py: where a run's wall time went, per pytest-xdist worker."""
from tests import timeline


def test_each_worker_says_how_long_it_was_busy_when_it_finished_and_its_largest_groups(
        tmp_path, monkeypatch):
    path = tmp_path / "timeline.jsonl"
    for worker, test, group, start, end in (("gw0", "a::1", "devices", 100, 700),
                                            ("gw0", "a::2", "devices", 700, 1000),
                                            ("gw1", "b::1", "wheels", 100, 250),
                                            ("gw1", "c::1", "fuzzers", 250, 300),
                                            ("gw1", "d::1", "native", 300, 320)):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        timeline.note(path, test, group, start, end)
    with open(path, "a") as cut:
        cut.write('{"worker": "gw1", "te')  # a worker that died mid-line
    assert timeline.summary(path, started=90, groups_shown=2) == [
        "gw0: busy 900 s, finished 910 s after the start; largest groups: devices 900 s",
        "gw1: busy 220 s, finished 230 s after the start; largest groups: wheels 150 s, "
        "fuzzers 50 s"]
    assert timeline.summary(tmp_path / "none", started=0) == []
