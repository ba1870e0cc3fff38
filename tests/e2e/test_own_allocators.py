"""Programs whose malloc is not libc's: one with an allocator linked into it, and programs built
with AddressSanitizer (gcc loads its runtime as a library, clang links it into the program).
droidheap says why nothing of them can be profiled, and leaves their run and exit as they were
alone."""
import shutil
import subprocess

import pytest

from droidheap.native import host_abi
from tests.e2e.conftest import PROGRAMS, compiler


def build(tmp_path, name, command):
    program = tmp_path / name
    subprocess.run([*command, "-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o",
                    str(program)], check=True)
    return program


def test_a_program_with_an_allocator_of_its_own_is_named_with_why(cli, abi, tmp_path):
    """Its malloc is its own, before every library's: the client stays out (a profile would
    hold nothing), and the warning says why rather than guessing."""
    program = build(tmp_path, "own_malloc", [compiler(abi), str(PROGRAMS / "own_allocator.c"),
                                             str(PROGRAMS / "alloc_sites.c")])
    result = cli.run("--local", "-o", tmp_path / "out", "--", program)
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout
    served = [line for line in result.stderr.splitlines() if line.startswith("own_allocator")]
    assert served and int(served[-1].split()[-1]) > 1000, result.stderr
    assert (f"warning: {program} (pid " in result.stderr and "never connected to droidheapd (its "
            "malloc is its own, an allocator linked into it" in result.stderr), result.stderr


@pytest.mark.parametrize("compiler_name", ["gcc", "clang"])
def test_a_program_built_with_address_sanitizer_runs_as_alone(cli, abi, tmp_path,
                                                              compiler_name):
    """gcc's runtime refused to start behind droidheap's library (droidheap now tells it not to
    mind); the memcpy it intercepts reported the client's stack copy as a read of the guard
    zones between stack variables; clang's took the client's own blocks for leaks and changed
    the exit status. The client stays out of both, and the warning names the sanitizer."""
    if abi != host_abi():
        pytest.skip("sanitized programs are built for this machine's ABI")
    if shutil.which(compiler_name) is None:
        pytest.skip(f"no {compiler_name}")
    try:
        program = build(tmp_path, "alloc_asan", [compiler_name, "-fsanitize=address",
                                                 str(PROGRAMS / "alloc_sites.c")])
    except subprocess.CalledProcessError:
        pytest.skip(f"{compiler_name} builds no AddressSanitizer program here")
    # The program keeps blocks to its end: ASan's leak check would fail it, alone too.
    cli.env["ASAN_OPTIONS"] = "detect_leaks=0"
    result = cli.run("--local", "-o", tmp_path / "out", "-i", "1", "--", program)
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout
    for report in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "does not come first"):
        assert report not in result.stderr, result.stderr
    assert ("never connected to droidheapd (built with AddressSanitizer, which checks every "
            "memory access, the profiler's too: profile a build without -fsanitize=address)"
            in result.stderr), result.stderr
