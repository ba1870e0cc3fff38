"""The shared buffer's flags through the emulator device: with the smallest buffer heap_profile
allows, --block-client (the default) loses nothing, while --no-block-client and a block timeout too
short to wait out end the profile and say that samples were lost."""
import pytest

from tests.e2e.test_profile import assert_sites, single_process
from tests.e2e.trace_check import totals_by_leaf_function

SMALLEST = ["--shmem-size", "8192"]


@pytest.mark.parametrize("flags", [[], ["--block-client"]])  # the default, and said so
def test_a_blocked_client_loses_nothing_in_the_smallest_buffer(cli, alloc_program, tmp_path,
                                                               flags):
    out = tmp_path / "out"
    result = cli.run("--local", *SMALLEST, *flags, "-i", "1", "-o", out, "--", alloc_program)
    assert result.returncode == 0, result.stderr
    assert "samples were lost" not in result.stderr
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", alloc_program)), 1)


@pytest.mark.parametrize("flags", [["--no-block-client"], ["--block-client-timeout", "1"]])
def test_a_client_that_may_not_wait_ends_its_profile_and_says_so(cli, alloc_program, tmp_path,
                                                                 flags):
    out = tmp_path / "out"
    # Stacks that never repeat: each sample a stack copy of kilobytes and an unwind, so the buffer
    # overruns however the threads are scheduled (repeated stacks go as 48-byte references, which
    # a daemon on a quiet machine may keep up with).
    result = cli.run("--local", *SMALLEST, *flags, "-i", "1", "-o", out, "--", alloc_program,
                     "--threads", "8", "--unrepeated", "4096")
    # The program itself is unaffected.
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout
    assert "note: samples were lost (the buffer overran); its profile ended early; the process " \
        "exited with status 0" in result.stderr, result.stderr
