"""Custom heaps through the emulator device: tests/programs/custom_heap.c reports a pool's and an
arena's blocks through droidheap/heaps.h, the copy installed beside the client. `--all-heaps`
records them beside libc's heap, `--heaps` picks some, neither records libc's alone; each heap of
each dump gets its own pprof, its call sites and its exact totals. A heap registered before the
profiler attached is found as surely as one registered after."""
import gzip
import re

from droidheap.pprof import Profile
from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import parse_trace
from tests.e2e.conftest import finished, kill_all
from tests.e2e.test_profile import read_line_containing
from tests.trace_processor import LoadedTrace, totals_by_site_in_pprof

ROUNDS = 300
BLOCK = 256  # the pool's
# Each round: the pool hands out 8 blocks and takes 6 back; the arena hands out 3 of 1000 bytes,
# all taken back by its reset every 4th round (ROUNDS is a multiple of 4).
POOL_IN_USE = 2 * BLOCK * ROUNDS
ARENA_ALLOCATED = 3 * 1000 * ROUNDS


def own_counts(stdout: str, heap: str) -> tuple:
    match = re.search(rf"^{heap} allocs=(\d+) alloc_bytes=(\d+) frees=(\d+) free_bytes=(\d+)$",
                      stdout, re.M)
    assert match, stdout
    return tuple(map(int, match.groups()))


def last_dumps(out):
    """{heap name: the last dump of it} of the one process profiled."""
    dumps = rebuild_dumps(parse_trace((out / "raw-trace").read_bytes()).packets).dumps
    (pid, process_dumps), = dumps.items()
    return pid, {d.heap_name: d for d in process_dumps}


def pprof_sites(out, pid, heap, prefix):
    path = out / f"heap_dump.0.{pid}.{heap}.pb.gz"
    assert path.exists(), sorted(p.name for p in out.iterdir())
    return totals_by_site_in_pprof(Profile.FromString(gzip.decompress(path.read_bytes())), prefix)


def assert_exact_totals(dump, stdout: str) -> None:
    t = dump.totals
    assert t is not None, dump
    # What the program reported, every call: no sampling, nothing of libc's in it.
    assert (t.alloc_count, t.alloc_bytes, t.free_count, t.free_bytes) == \
        own_counts(stdout, dump.heap_name)


def test_all_heaps_gives_each_heap_its_pprof_sites_and_totals(cli, programs, tmp_path):
    program = programs("custom_heap")
    out = tmp_path / "out"
    result = cli.run("--local", "--all-heaps", "-i", "1", "-o", out, "--", program, str(ROUNDS))
    assert result.returncode == 0, result.stderr
    pid, dumps = last_dumps(out)
    assert set(dumps) == {"libc.malloc", "pool", "arena"}, dumps.keys()
    for heap in ("pool", "arena"):
        assert_exact_totals(dumps[heap], result.stdout)
        assert f"heap {heap}, 1 dump" in result.stderr, result.stderr
    # Every block sampled (-i 1): the pool's kept blocks are what is in use, at its only site;
    # the arena gave everything back.
    pool = pprof_sites(out, pid, "pool", "pool_site")
    assert pool["pool_site"].allocated - pool["pool_site"].freed == POOL_IN_USE, pool
    assert set(pool) == {"pool_site"}, pool
    arena = pprof_sites(out, pid, "arena", "arena_site")
    assert arena["arena_site"].allocated == arena["arena_site"].freed == ARENA_ALLOCATED, arena
    # libc's heap holds the program's mallocs, not the blocks cut from them.
    libc = pprof_sites(out, pid, "libc.malloc", "")
    assert "pool_site" not in libc and "arena_site" not in libc, libc
    with LoadedTrace(out / "symbolized-trace") as trace:
        assert trace.problems() == []
        heaps = {r["heap_name"]: r["size"] for r in trace.rows(
            "select heap_name, sum(size) as size from heap_profile_allocation group by heap_name")}
        counters = {r["name"]: r["value"] for r in trace.rows(
            "select t.name, c.value from counter c join process_counter_track t "
            "on c.track_id = t.id where t.name glob 'pool: *'")}
    assert heaps["pool"] == POOL_IN_USE and heaps["arena"] == 0, heaps
    assert counters["pool: allocations"] == dumps["pool"].totals.alloc_count, counters


def test_heaps_registered_before_the_profiler_attached_are_found(cli, programs, tmp_path):
    program = programs("custom_heap")
    go = tmp_path / "go"
    out = tmp_path / "out"
    running = cli.start("--local", "shell", "--", program, "--wait-file", go, "--threads", "2",
                        str(ROUNDS))
    session = None
    try:
        pid = int(read_line_containing(running.stdout, "registered pid=", 30).split("=")[1])
        session = cli.start("--local", "-p", str(pid), "--heaps", "pool", "-o", out)
        read_line_containing(session.stderr, f"attached to pid {pid}", 60)
        go.touch()
        stdout, _ = finished(running, 120, "the running program")
        assert running.returncode == 0
        _, stderr = finished(session, 120)
        assert session.returncode == 0, stderr
    finally:
        kill_all(running, session)
    got_pid, dumps = last_dumps(out)
    assert got_pid == pid
    # --heaps pool: neither libc's heap nor the arena.
    assert set(dumps) == {"pool"}, dumps.keys()
    # Attached while it ran: its allocations since are exact; its frees are left out, since frees
    # of blocks older than the attach cannot be told apart (test_attach_totals.py).
    assert dumps["pool"].totals is None, dumps["pool"]
    with LoadedTrace(out / "symbolized-trace") as trace:
        counters = {r["name"]: r["value"] for r in trace.rows(
            "select t.name, c.value from counter c join process_counter_track t "
            "on c.track_id = t.id join process p using (upid) "
            f"where p.pid = {pid} and t.name glob 'pool: *' order by c.ts")}
    allocs, alloc_bytes, _, _ = own_counts(stdout, "pool")
    assert (counters["pool: allocations"], counters["pool: allocated bytes"]) == \
        (allocs, alloc_bytes), counters
    assert "pool: frees" not in counters, counters
    assert [p.name for p in out.glob("*.pb.gz")] == [f"heap_dump.0.{pid}.pool.pb.gz"]


def test_without_heap_flags_libc_alone_is_recorded(cli, programs, tmp_path):
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "--", programs("custom_heap"), str(ROUNDS))
    assert result.returncode == 0, result.stderr
    _, dumps = last_dumps(out)
    assert set(dumps) == {"libc.malloc"}, dumps.keys()
