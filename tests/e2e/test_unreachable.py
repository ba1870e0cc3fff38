"""--unreachable: as a program exits normally, the live sampled blocks nothing in it points to any
more, found in a copy forked while its threads are held (tests/programs/reachability.c keeps and
drops blocks in each way). At -i 1 the sweep finds what LeakSanitizer finds in the same program
built with -fsanitize=leak; sampled, it never calls a kept block unreachable; under qemu-user,
where no thread can be held, the line says what was not read."""
import re
import shutil
import subprocess

import pytest

from droidheap.native import host_abi
from tests.e2e.conftest import PROGRAMS

# 70 blocks of 48 bytes and 20 of 32 are dropped; every kept block has another size.
DROPPED_BLOCKS, DROPPED_BYTES = 90, 4000
SWEEP = re.compile(r"droidheap: pid \d+: unreachable: (\d+) of (\d+) sampled blocks \((\d+) "
                   r"bytes\), (every block known|sampled blocks)(.*)")


def exit_sweep(result):
    """(unreachable blocks, bytes, whether every block was known, the rest of the line)."""
    assert result.returncode == 0, result.stderr
    sweeps = SWEEP.findall(result.stderr)
    assert len(sweeps) == 1, result.stderr
    blocks, _, size, known, rest = sweeps[0]
    return int(blocks), int(size), known == "every block known", rest


def leaksanitizer_total(tmp_path):
    """(bytes, blocks) LeakSanitizer reports for reachability.c built as the tests build it."""
    source = PROGRAMS / "reachability.c"
    program = tmp_path / "reachability-lsan"
    if shutil.which("cc") is None or subprocess.run(
            ["cc", "-O1", "-fno-omit-frame-pointer", "-g", "-pthread", "-fsanitize=leak",
             str(source), "-o", str(program)], capture_output=True).returncode != 0:
        pytest.skip("no compiler here builds with -fsanitize=leak")
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    found = re.search(r"SUMMARY: LeakSanitizer: (\d+) byte\(s\) leaked in (\d+) allocation",
                      result.stderr)
    assert found, result.stderr
    return int(found.group(1)), int(found.group(2))


def test_at_interval_1_the_exit_sweep_finds_what_leaksanitizer_finds(cli, programs, abi,
                                                                     tmp_path):
    result = cli.run("--local", "-i", "1", "--unreachable", "-o", tmp_path / "out", "--",
                     programs("reachability"))
    blocks, size, complete, rest = exit_sweep(result)
    assert (blocks, size, complete) == (DROPPED_BLOCKS, DROPPED_BYTES, True), result.stderr
    if abi != host_abi():  # qemu-user: copied as it ran, and said so
        assert "registers not read" in rest, result.stderr
    if abi == host_abi():
        assert leaksanitizer_total(tmp_path) == (DROPPED_BYTES, DROPPED_BLOCKS)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sampled_no_kept_block_is_called_unreachable(cli, programs, abi, tmp_path, seed):
    result = cli.run("--local", "-i", "64", "--seed", seed, "--unreachable", "-o",
                     tmp_path / "out", "--", programs("reachability"))
    blocks, size, complete, _ = exit_sweep(result)
    assert not complete
    # Only the dropped blocks, 70 of 48 bytes and 20 of 32, add up to what it found.
    assert any(48 * n + 32 * (blocks - n) == size
               for n in range(max(0, blocks - 20), min(blocks, 70) + 1)), result.stderr


def test_the_benchmark_explains_itself():
    """bench/unreachable.py, which prints the stall and the sweep per GiB beside LeakSanitizer's
    exit check (too long a run for the suite)."""
    from tests import bench_scripts
    text = bench_scripts.help_text("unreachable.py")
    assert "--sizes" in text and "LeakSanitizer" in text
