"""Where a run's wall time went: each pytest-xdist worker notes when each of its tests ran (from
its setup to its teardown, the builds its fixtures make included), and the run ends with a line
per worker: how long it was busy, when it finished, its largest modules and its slowest tests;
then how busy the machine's cores were. The suite's wall time is its last worker's finish; a
worker that finished long before the other is time the order could win back (tests/conftest.py,
_start_order), and idle cores are time more workers could."""
import collections
import json
import os
import pathlib
import resource
from typing import Dict, List, Optional, Tuple

# The file the workers append to, named by the controller in the environment they inherit.
ENVIRONMENT = "DROIDHEAP_TEST_TIMELINE"


def cpu_seconds() -> float:
    """User and system CPU time of this process and of every process it has waited for."""
    return sum(sum(resource.getrusage(who)[:2])
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


def note(path: pathlib.Path, nodeid: str, start: float, end: float, cpu: float = 0.0) -> None:
    line = json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": nodeid,
                       "start": start, "end": end, "cpu": cpu}) + "\n"
    with open(path, "a") as timeline:  # one write of one line: the workers' lines do not mix
        timeline.write(line)


def summary(path: pathlib.Path, started: float, modules_shown: int = 4,
            tests_shown: int = 10, cpu_modules_shown: int = 15) -> List[str]:
    """Two lines per worker and one of CPU time, as the module says; none when no test was
    noted."""
    busy: Dict[str, float] = collections.defaultdict(float)
    finished: Dict[str, float] = {}
    by_module: Dict[str, Dict[str, float]] = collections.defaultdict(
        lambda: collections.defaultdict(float))
    by_test: Dict[str, Dict[str, float]] = collections.defaultdict(
        lambda: collections.defaultdict(float))
    cpu_by_module: Dict[str, float] = collections.defaultdict(float)
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
            by_module[worker][t["test"].split("::")[0]] += took
            by_test[worker][t["test"]] += took
            cpu_by_module[t["test"].split("::")[0]] += float(t.get("cpu", 0.0))
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by a worker's crash
    said = []
    for worker in sorted(busy):
        largest = sorted(by_module[worker].items(), key=lambda m: -m[1])[:modules_shown]
        said.append(f"{worker}: busy {busy[worker]:.0f} s, finished {finished[worker]:.0f} s "
                    "after the start; largest modules: "
                    + ", ".join(f"{module} {took:.0f} s" for module, took in largest))
        slowest = sorted(by_test[worker].items(), key=lambda t: -t[1])[:tests_shown]
        said.append(f"{worker}'s slowest tests: "
                    + ", ".join(f"{test} {took:.0f} s" for test, took in slowest))
    if said:
        most = sorted(cpu_by_module.items(), key=lambda m: -m[1])[:cpu_modules_shown]
        said.append(f"CPU time {sum(cpu_by_module.values()):.0f} s; the most: "
                    + ", ".join(f"{module} {cpu:.0f} s" for module, cpu in most))
    return said


def cpu_times() -> Optional[Tuple[int, int]]:
    """(busy, all) clock ticks of every core since boot, from /proc/stat; None where unreadable."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(f) for f in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle, iowait
    return sum(fields) - idle, sum(fields)


def cores_busy(before: Optional[Tuple[int, int]], after: Optional[Tuple[int, int]]) -> str:
    """How busy the machine's cores were between two cpu_times(), as a line; "" when unknown."""
    if before is None or after is None or after[1] <= before[1]:
        return ""
    share = (after[0] - before[0]) / (after[1] - before[1])
    return f"the cores were busy {share:.0%} of the run (every process on the machine)"
