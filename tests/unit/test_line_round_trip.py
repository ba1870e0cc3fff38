"""bench/programs/line_round_trip.c, which bench/overhead.py runs first: a cache line's round trip
between two cores in ns, and a clear refusal where the process may run on one CPU alone."""
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> pathlib.Path:
    built = tmp_path_factory.mktemp("round-trip") / "line_round_trip"
    subprocess.run(["cc", "-O2", "-pthread", str(ROOT / "bench" / "programs" / "line_round_trip.c"),
                    "-o", str(built)], check=True)
    return built


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU to run on")
def test_prints_a_round_trip_between_two_cores(program):
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    found = re.fullmatch(r"round_trip_ns=(\d+)\n", result.stdout)
    # Two stores and two loads that must each cross: never nothing, never a millisecond.
    assert found and 0 < int(found.group(1)) < 1_000_000, result.stdout


def test_refuses_with_one_cpu(program):
    one = min(os.sched_getaffinity(0))
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=120,
                            preexec_fn=lambda: os.sched_setaffinity(0, {one}))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "line_round_trip: fewer than two CPUs to run on\n"
