"""Where a run's wall time went: each pytest-xdist worker notes when each of its tests ran (from
its setup to its teardown, the builds its fixtures make included) and in which group, and the run
ends with a line per worker: how long it was busy, when it finished, and its largest groups. The
suite's wall time is its last worker's finish; a worker that finished long before the other is
time the order could win back (tests/conftest.py, _start_order)."""
import collections
import json
import os
import pathlib
from typing import Dict, List

# The file the workers append to, named by the controller in the environment they inherit.
ENVIRONMENT = "DROIDHEAP_TEST_TIMELINE"


def note(path: pathlib.Path, nodeid: str, group: str, start: float, end: float) -> None:
    line = json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": nodeid,
                       "group": group, "start": start, "end": end}) + "\n"
    with open(path, "a") as timeline:  # one write of one line: the workers' lines do not mix
        timeline.write(line)


def summary(path: pathlib.Path, started: float, groups_shown: int = 3) -> List[str]:
    """A line per worker, as the module says; none when no test was noted."""
    busy: Dict[str, float] = collections.defaultdict(float)
    finished: Dict[str, float] = {}
    by_group: Dict[str, Dict[str, float]] = collections.defaultdict(
        lambda: collections.defaultdict(float))
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            t = json.loads(line)
            worker, took = t["worker"], t["end"] - t["start"]
            busy[worker] += took
            finished[worker] = max(finished.get(worker, 0.0), t["end"] - started)
            by_group[worker][t["group"]] += took
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by a worker's crash
    said = []
    for worker in sorted(busy):
        largest = sorted(by_group[worker].items(), key=lambda g: -g[1])[:groups_shown]
        said.append(f"{worker}: busy {busy[worker]:.0f} s, finished {finished[worker]:.0f} s "
                    "after the start; largest groups: "
                    + ", ".join(f"{group} {took:.0f} s" for group, took in largest))
    return said
