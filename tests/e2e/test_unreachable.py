"""--unreachable: as a program exits normally, the live sampled blocks nothing in it points to any
more, found in a copy forked while its threads are held (tests/programs/reachability.c keeps and
drops blocks in each way). At -i 1 the sweep finds what LeakSanitizer finds in the same program
built with -fsanitize=leak, site by site; sampled, it never calls a kept block unreachable; under
qemu-user, where no thread can be held, the line says what was not read. The verdict is in every
output: the results the reports read, the pprof files, the trace Perfetto's tools open."""
import collections
import gzip
import re
import shutil
import subprocess

import pytest

from droidheap.native import host_abi
from droidheap.pprof import Profile as PprofProfile
from droidheap.results.load import load_results
from tests.e2e.conftest import PROGRAMS
from tests.trace_processor import LoadedTrace

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


# A leak's report: "Direct leak of 48 byte(s) in 1 object(s) allocated from:", then its frames,
# "#0 0x... in malloc ..." (gcc's: __interceptor_malloc), "#1 0x... in site_dropped
# /path/reachability.c:64".
LSAN_LEAK = re.compile(r"(?:Direct|Indirect) leak of (\d+) byte\(s\) in (\d+) object\(s\) "
                       r"allocated from:\n(?:\s+#\d+ 0x[0-9a-f]+ in \w*(?:malloc|calloc)\b.*\n)*"
                       r"\s+#\d+ 0x[0-9a-f]+ in (\w+)")


def leaksanitizer_leaks(tmp_path):
    """LeakSanitizer's report of reachability.c built as the tests build it: (bytes, blocks) in
    all, and by the function that called malloc."""
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
    sites = collections.Counter()
    for size, count, function in LSAN_LEAK.findall(result.stderr):
        sites[function, "bytes"] += int(size)
        sites[function, "blocks"] += int(count)
    return (int(found.group(1)), int(found.group(2))), {
        function: (sites[function, "bytes"], sites[function, "blocks"])
        for function, _ in sites}


DROPPED_SITES = {"site_dropped_list", "site_cycles", "site_dropped"}


def _by_site(samples):
    """(bytes, blocks) in use by call site's function, of the sites that have any."""
    sites = collections.Counter()
    for sample in samples:
        sites[sample.stack.site.function, "bytes"] += sample.in_use_bytes
        sites[sample.stack.site.function, "blocks"] += sample.in_use_count
    return {function: (sites[function, "bytes"], sites[function, "blocks"])
            for function, _ in sites if sites[function, "blocks"]}


def unreachable_sites(out, in_use=False):
    """What the exit dump's sweep found, by call site, as the reports read it from `out` (and,
    `in_use`, what was in use at each site then)."""
    profile = [p for p in load_results(out).profiles if p.heap == "libc.malloc"][-1]
    found = (profile.unreachable, _by_site(profile.unreachable.samples))
    return found + (_by_site(profile.samples),) if in_use else found


def pprof_unreachable_bytes(out) -> int:
    """The unreachable bytes the last pprof file of libc's heap gives."""
    path = sorted(out.glob("heap_dump.*.libc.malloc.pb.gz"),
                  key=lambda p: int(p.name.split(".")[1]))[-1]
    profile = PprofProfile.FromString(gzip.decompress(path.read_bytes()))
    types = [profile.string_table[t.type] for t in profile.sample_type]
    return sum(s.value[types.index("unreachable_space")] for s in profile.sample)


def test_at_interval_1_the_exit_sweep_finds_what_leaksanitizer_finds(cli, programs, abi,
                                                                     tmp_path):
    result = cli.run("--local", "-i", "1", "--unreachable", "-o", tmp_path / "out", "--",
                     programs("reachability"))
    blocks, size, complete, rest = exit_sweep(result)
    assert (blocks, size, complete) == (DROPPED_BLOCKS, DROPPED_BYTES, True), result.stderr
    if abi != host_abi():  # qemu-user: copied as it ran, and said so
        assert "registers not read" in rest, result.stderr
    found, sites = unreachable_sites(tmp_path / "out")
    assert (found.complete, found.blocks, found.bytes) == (True, DROPPED_BLOCKS, DROPPED_BYTES)
    assert ("registers not read" in found.note) == (abi != host_abi()), found.note
    assert sites == {"site_dropped_list": (50 * 48, 50), "site_cycles": (20 * 48, 20),
                     "site_dropped": (20 * 32, 20)}
    assert pprof_unreachable_bytes(tmp_path / "out") == DROPPED_BYTES
    with LoadedTrace(tmp_path / "out" / "raw-trace") as loaded:
        assert loaded.problems() == []
        rows = loaded.rows("select heap_name, sum(size) as size from heap_profile_allocation "
                           "group by heap_name")
    assert {r["heap_name"]: r["size"] for r in rows}["libc.malloc.unreachable"] == DROPPED_BYTES
    if abi == host_abi():
        total, lsan_sites = leaksanitizer_leaks(tmp_path)
        assert total == (DROPPED_BYTES, DROPPED_BLOCKS)
        assert lsan_sites == sites


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sampled_no_kept_block_is_called_unreachable(cli, programs, abi, tmp_path, seed):
    result = cli.run("--local", "-i", "64", "--seed", seed, "--unreachable", "-o",
                     tmp_path / "out", "--", programs("reachability"))
    blocks, size, complete, _ = exit_sweep(result)
    assert not complete
    # Only the dropped blocks, 70 of 48 bytes and 20 of 32, add up to what it found.
    assert any(48 * n + 32 * (blocks - n) == size
               for n in range(max(0, blocks - 20), min(blocks, 70) + 1)), result.stderr
    found, sites = unreachable_sites(tmp_path / "out")
    assert (found.complete, found.blocks, found.bytes) == (False, blocks, size)
    assert set(sites) <= DROPPED_SITES, sites


def test_the_benchmark_explains_itself():
    """bench/unreachable.py, which prints the stall and the sweep per GiB beside LeakSanitizer's
    exit check (too long a run for the suite)."""
    from tests import bench_scripts
    text = bench_scripts.help_text("unreachable.py")
    assert "--sizes" in text and "LeakSanitizer" in text
