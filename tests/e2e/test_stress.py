"""Stress (tests/programs/stress.c): 32 threads at a time allocating, reallocating and freeing
blocks they check byte by byte (a third freed by another thread), threads created and ended,
forks, fork+exec, signals during allocation and allocation in a signal handler. Profiled at -i 1
and at 4096 it computes the checksum it computes unprofiled, exits normally and ends: its own
watchdog and the test's timeout bound every run. Nothing is lost: at -i 1 every allocation is a
sample, but for those made by a signal handler that interrupted the profiler's own hook."""
import json
import os
import re

import pytest

from tests.e2e.test_forks import exec_args

# Operations per thread, per generation of 32 threads: qemu-user runs arm64 ~10x slower.
# DROIDHEAP_STRESS_SCALE multiplies them, for longer runs than CI's.
SCALE = int(os.environ.get("DROIDHEAP_STRESS_SCALE", "1"))
OPS = {"x86_64": 50000 * SCALE, "arm64-v8a": 8000 * SCALE}


@pytest.fixture
def stress_argv(programs, abi):
    program = programs("stress")
    return [program, OPS[abi], *exec_args(abi, program), "child"]


def checksum(stdout: str) -> str:
    found = re.search(r"checksum=\d+ ops=\d+", stdout)
    assert found, stdout
    return found.group(0)


def assert_nothing_lost(report: str, stderr: str, ops: int, interval: int) -> list:
    """Checks the stress program's profile (`report`: droidheap report --json) against what it
    said on `stderr`; returns the profiles of its exec'd children."""
    profiles = json.loads(report)["profiles"]
    children = [p for p in profiles if p["cmdline"].split()[1:] == ["child"]]
    (main,) = [p for p in profiles if p not in children]
    assert main["samples_lost"] == [], main["samples_lost"]
    assert main["exact"]["alloc_count"] >= 32 * 3 * ops // 2
    if interval == 1:
        in_handler = int(re.search(r"(\d+) allocations in a signal handler", stderr).group(1))
        unsampled = main["exact"]["alloc_count"] - main["sampled"]["alloc_count"]
        assert 0 <= unsampled <= in_handler, (main["exact"], main["sampled"], in_handler)
    return children


@pytest.mark.parametrize("interval", [1, 4096])
def test_stress_program_is_unaffected_and_nothing_is_lost(cli, stress_argv, tmp_path, interval):
    plain = cli.run("--local", "shell", "--", *stress_argv, timeout=900)
    assert plain.returncode == 0, plain.stderr[-3000:]
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "-i", interval, "--", *stress_argv, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert checksum(result.stdout) == checksum(plain.stdout)
    report = cli.run("report", out, "--json")
    assert report.returncode == 0, report.stderr
    children = assert_nothing_lost(report.stdout, result.stderr, int(stress_argv[1]), interval)
    # The exec'd children, named as the session's program, were profiled from their start.
    assert len(children) == 6, children
