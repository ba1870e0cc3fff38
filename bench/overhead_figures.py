"""bench/overhead.py's figures: what a workload and droidheap's outputs say of a run, the medians,
the tables and the goals. Pure functions, but for reading a run's output directory."""
import dataclasses
import pathlib
import re
import statistics
from typing import Callable, Dict, List, Optional, Tuple

from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import parse_trace

DEPTHS = [10, 30, 60]
DEPTH_INTERVAL = 4096
# Bytes of live stack above malloc_churn's allocations (-S), and the columns they are timed in.
STACK_SIZES = [512, 8192, 32768, 131072]
STACK_COLUMNS = {"dh 4096": "@4096", "dh 1": "@-i 1"}  # column: how a goal names it
# Issue 56: the cost of a sample at the largest stack within this multiple of the smallest's.
FLAT = 1.3
# One heap, sampled below and past the ~50k live samples the first part of the client's table
# holds: malloc_churn -s LIVE_SIZES with a window of LIVE_WINDOW blocks (107 MiB), then
# LIVE_CHURN allocations more, at these intervals (27k and 110k live samples). The same program
# and heap in both: only the live samples differ.
LIVE_SIZES = (16, 256)
LIVE_WINDOW = 830_000
LIVE_CHURN = 4_000_000
LIVE_INTERVALS = [("dh 4096", 4096), ("dh 1024", 1024)]  # (column, interval): few, then many
CUSTOM_HEAP = "churn"  # the heap malloc_churn -c reports to
# The programs the goals name, by their label in bench/overhead.py.
GOAL_PROGRAMS = ["perl hash", "python3 dict", "sqlite3 rows"]

# A dump's flags that say samples were lost, and how to say it.
LOSS_FLAGS = {"buffer_overran": "buffer overran", "buffer_corrupted": "buffer corrupted",
              "hit_guardrail": "guardrail hit", "rejected_concurrent": "rejected"}


@dataclasses.dataclass
class DaemonStats:
    """What droidheap's trace says of the profiled process."""
    samples: int  # heap_samples of the last dump: every sample since it connected
    busy_us: int  # total_unwinding_time_us, likewise
    unwinding_errors: int
    deepest_stack: int  # frames, in the last dump
    losses: List[str]
    blocked_us: int = 0  # the client's time waiting for room in the full buffer
    cpu_s: float = 0.0  # droidheapd's CPU time, user and system, from its log
    peak_rss_kib: int = 0  # droidheapd's, likewise
    # Of the samples its log counts: those the process matched itself (no stack sent), and those
    # unwound afresh (the rest came from the daemon's stack cache).
    matched: int = 0
    unwound: int = 0
    logged_samples: int = 0


@dataclasses.dataclass
class Run:
    """One run of a workload under one configuration."""
    elapsed_ns: int
    peak_rss_kib: int
    allocations: Optional[int]  # when the workload counts them (malloc_churn)
    cpu_ns: Optional[int] = None  # every thread's CPU time meanwhile, when it says (malloc_churn)
    daemon: Optional[DaemonStats] = None  # droidheap's runs
    # From the program's fork to its exit (bench/programs/whole_run.c), for the programs run so.
    whole_ns: Optional[int] = None

    @property
    def samples_per_s(self) -> Optional[float]:
        if not self.daemon:
            return None
        return self.daemon.samples / (self.elapsed_ns / 1e9)

    @property
    def daemon_ns_per_sample(self) -> Optional[float]:
        if not self.daemon or not self.daemon.samples:
            return None
        return self.daemon.busy_us * 1000 / self.daemon.samples

    @property
    def daemon_cpu_ns_per_sample(self) -> Optional[float]:
        if not self.daemon or not self.daemon.samples or not self.daemon.cpu_s:
            return None
        return self.daemon.cpu_s * 1e9 / self.daemon.samples


def parse_run(output: str) -> Run:
    """A workload's own account of its run: an `elapsed_ns=N` line or the sum of sqlite3's `.timer`
    lines, a VmHWM line copied from /proc/self/status and, from malloc_churn, `allocations=N` and
    `cpu_ns=N`; from whole_run, `whole_ns=N`."""
    found = re.search(r"elapsed_ns=(\d+)", output)
    sqlite = re.findall(r"Run Time: real ([0-9.]+)", output)
    peak = re.search(r"VmHWM:\s*(\d+) kB", output)
    if (found is None and not sqlite) or peak is None:
        raise RuntimeError(f"the workload printed no time or no VmHWM:\n{output[-2000:]}")
    elapsed = int(found.group(1)) if found else int(sum(float(t) for t in sqlite) * 1e9)
    allocations = re.search(r"allocations=(\d+)", output)
    cpu = re.search(r"cpu_ns=(\d+)", output)
    whole = re.search(r"whole_ns=(\d+)", output)
    return Run(elapsed, int(peak.group(1)), allocations and int(allocations.group(1)),
               cpu and int(cpu.group(1)), whole_ns=whole and int(whole.group(1)))


def daemon_stats(out: pathlib.Path) -> DaemonStats:
    """The profiled process's figures in `out`/raw-trace, read by droidheap's own reader: a dump
    comes in fragments, any of which may carry the stats or a flag."""
    dumps = rebuild_dumps(parse_trace((out / "raw-trace").read_bytes()).packets).dumps
    if not dumps:
        raise RuntimeError(f"{out}/raw-trace holds no dump: the client never connected")
    # Each workload is one process; should a helper connect too, the program is the busiest.
    pid = max(dumps, key=lambda p: dumps[p][-1].stats.heap_samples)
    last = dumps[pid][-1]
    losses = sorted({text for dump in dumps[pid] for flag, text in LOSS_FLAGS.items()
                     if getattr(dump, flag)})
    return DaemonStats(last.stats.heap_samples, last.stats.total_unwinding_time_us,
                       last.stats.unwinding_errors,
                       max((len(s.frames) for s in last.samples), default=0), losses,
                       last.stats.client_spinlock_blocked_us)


def daemon_usage(out: pathlib.Path) -> Tuple[float, int]:
    """(CPU seconds, peak RSS KiB) droidheapd logged as it stopped, from the log in `out`."""
    log = out / "droidheapd.log"
    found = log.exists() and re.search(r"stopped: cpu user ([0-9.]+) s system ([0-9.]+) s, "
                                       r"peak RSS (\d+) KiB", log.read_text())
    if not found:
        raise RuntimeError(f"no droidheapd log with its usage in {out}")
    return float(found.group(1)) + float(found.group(2)), int(found.group(3))


def sample_paths(out: pathlib.Path) -> Tuple[int, int, int]:
    """(samples, matched by the process, unwound) droidheapd logged as the processes went, summed
    over them, from the log in `out`."""
    found = re.findall(r"samples pid=\d+: (\d+), (\d+) matched by the process, (\d+) unwound",
                       (out / "droidheapd.log").read_text())
    return tuple(sum(int(f[i]) for f in found) for i in range(3))


def median(runs: List[Run], figure: Callable[[Run], Optional[float]]) -> Optional[float]:
    values = [v for v in map(figure, runs) if v is not None]
    return statistics.median(values) if values else None


Rows = List[Tuple[str, Dict[str, List[Run]]]]  # (workload, {column: runs})


def multiple(by_column: Dict[str, List[Run]], column: str,
             whole: bool = False) -> Optional[float]:
    """A column's elapsed time (`whole`: whole run) as a multiple of glibc's: the median of each
    round's ratio to glibc's run of the same round (overhead.measure runs every column once a
    round), so that a slow spell of the machine, which falls on a round's runs alike, cancels in
    its ratio; the medians' ratio where the columns' runs do not pair up."""
    if column not in by_column or "glibc" not in by_column:
        return None

    def figure(r: Run) -> Optional[float]:
        return r.whole_ns if whole else r.elapsed_ns

    runs, alone = by_column[column], by_column["glibc"]
    if len(runs) == len(alone):
        ratios = [figure(a) / figure(b) for a, b in zip(runs, alone)
                  if figure(a) is not None and figure(b)]
        return statistics.median(ratios) if ratios else None
    run, base = median(runs, figure), median(alone, figure)
    return None if run is None or not base else run / base


def print_elapsed_table(title: str, rows: Rows, whole: bool = False) -> None:
    """glibc's median elapsed time (`whole`: whole run), and each column's as a multiple of it
    (multiple(): paired by round)."""
    columns = list(rows[0][1])
    print(f"{title:>14} {'glibc ms':>9} " + " ".join(f"{c:>10}" for c in columns[1:]))
    for label, by_column in rows:
        alone = median(by_column["glibc"], lambda r: r.whole_ns if whole else r.elapsed_ns)
        if not alone:
            continue
        times = {c: multiple(by_column, c, whole) for c in columns[1:]}
        print(f"{label:>14} {alone / 1e6:>9.0f} "
              + " ".join(f"{times[c]:>9.2f}x" if times[c] else f"{'-':>10}" for c in columns[1:]))


def print_daemon_table(rows: Rows) -> None:
    """Per droidheap column: samples per second reaching the daemon, the daemon's busy ns and CPU
    ns per sample, its peak RSS, the CPU ns the client adds to the program per sample (over
    dh 1e9; for workloads that say their CPU time) and the ms its threads waited for room in the
    full buffer."""
    columns = [c for c in rows[0][1] if rows[0][1][c][0].daemon]
    print(f"{'daemon':>14} " + " ".join(f"{c:>44}" for c in columns))
    print(f"{'':>14} " + " ".join(f"{'samples/s':>10} {'ns':>6} {'cpu ns':>6} {'MiB':>5} "
                                  f"{'client':>6} {'wait':>6}" for _ in columns))
    for label, by_column in rows:
        cells = []
        for c in columns:
            runs = by_column[c]
            rate = median(runs, lambda r: r.samples_per_s)
            figures = [median(runs, lambda r: r.daemon_ns_per_sample),
                       median(runs, lambda r: r.daemon_cpu_ns_per_sample)]
            rss = median(runs, lambda r: r.daemon.peak_rss_kib / 1024)
            client = (client_ns_per_sample(runs, by_column["dh 1e9"])
                      if c != "dh 1e9" and "dh 1e9" in by_column else None)
            waited_ms = median(runs, lambda r: r.daemon.blocked_us / 1000)
            cells.append(f"{rate:>10.0f} " + " ".join(f"{f:>6.0f}" if f is not None else f"{'-':>6}"
                                                      for f in figures) + f" {rss:>5.1f} "
                         + (f"{client:>6.0f}" if client is not None else f"{'-':>6}")
                         + f" {waited_ms:>6.0f}")
        print(f"{label:>14} " + " ".join(cells))


def print_rss_table(rows: Rows) -> None:
    columns = list(rows[0][1])
    print(f"{'peak RSS MiB':>14} " + " ".join(f"{c:>10}" for c in columns))
    for label, by_column in rows:
        print(f"{label:>14} " + " ".join(
            f"{median(by_column[c], lambda r: r.peak_rss_kib / 1024):>10.1f}" for c in columns))


def print_fast_path(runs: Dict[str, List[Run]], allocs: int) -> None:
    layer = [r.elapsed_ns / allocs for r in runs["layer"]]
    client = [r.elapsed_ns / allocs for r in runs["dh 1e9"]]
    print(f"unsampled fast path, wall (32-byte malloc+free pairs, 1 thread, {len(layer)} runs "
          f"each): the layer alone {statistics.median(layer):.1f} ns per pair, dh 1e9 adds "
          f"{statistics.median(client) - statistics.median(layer):.1f} ns (medians), "
          f"{min(client) - min(layer):.1f} ns (fastest runs)")


def print_custom_heap(by_threads: Dict[int, Dict[str, List[Run]]], allocs: int) -> None:
    print(f"custom heap reports, wall (alloc+free report pairs, malloc_churn -c, "
          f"dh 1e9 --heaps {CUSTOM_HEAP}):")
    for threads, runs in by_threads.items():
        alone = statistics.median(r.elapsed_ns / allocs for r in runs["alone"])
        recorded = statistics.median(r.elapsed_ns / allocs for r in runs["dh 1e9"])
        print(f"  {threads} thread{'s' if threads > 1 else ''}: {alone:.1f} ns per pair "
              f"unprofiled, recording adds {recorded - alone:.1f} ns (medians)")


def ns_per_sample(by_column: Dict[str, List[Run]], column: str,
                  base: str = "glibc") -> Optional[float]:
    """The elapsed time a column adds to `base`'s per sample it took, from the medians."""
    samples = median(by_column.get(column, []), lambda r: r.daemon and r.daemon.samples)
    if not samples or base not in by_column:
        return None
    return (median(by_column[column], lambda r: r.elapsed_ns) -
            median(by_column[base], lambda r: r.elapsed_ns)) / samples


StackRuns = Dict[Tuple[str, int], Dict[str, List[Run]]]  # (build, stack bytes): {column: runs}


def print_stack_sizes(by_size: StackRuns) -> None:
    print("cost per sample by live stack above the allocation (malloc_churn -S, 1 thread, "
          "random frees): elapsed multiple, ns added per sample, and the share of samples the "
          "process matched itself (sending no stack)")
    print(f"  {'build':<20} {'stack':>8} " + " ".join(f"{c:>25}" for c in STACK_COLUMNS))
    for (build, size), by_column in by_size.items():
        cells = []
        for column in STACK_COLUMNS:
            times, cost = multiple(by_column, column), ns_per_sample(by_column, column)
            matched = median(by_column.get(column, []), lambda r: r.daemon and
                             r.daemon.logged_samples and r.daemon.matched / r.daemon.logged_samples)
            cells.append("-" if times is None or cost is None else
                         f"{times:.2f}x {cost:6.0f} ns " +
                         ("    -" if matched is None else f"{matched:5.1%}"))
        print(f"  {build:<20} {_bytes(size):>8} " + " ".join(f"{c:>25}" for c in cells))


def live_samples(interval: int) -> int:
    """The sampled blocks LIVE_WINDOW blocks of malloc_churn -s LIVE_SIZES hold at `interval`
    (the mean block stands for its share of an interval)."""
    return LIVE_WINDOW * (LIVE_SIZES[0] + LIVE_SIZES[1]) // 2 // interval


def print_live_samples(by_column: Dict[str, List[Run]]) -> None:
    heap = LIVE_WINDOW * sum(LIVE_SIZES) // 2
    print(f"cost per sample by live samples (malloc_churn -s {LIVE_SIZES[0]}:{LIVE_SIZES[1]} -w "
          f"{LIVE_WINDOW}: {_bytes(heap)} of live heap, 1 thread, random frees; dh 1e9 "
          f"{multiple(by_column, 'dh 1e9') or 0:.2f}x, its unsampled calls' lines cold): elapsed "
          "multiple, and the ns each sample adds to dh 1e9")
    for column, interval in LIVE_INTERVALS:
        times, cost = multiple(by_column, column), ns_per_sample(by_column, column, base="dh 1e9")
        print(f"  {column:<8} {live_samples(interval):>8} live: " +
              ("-" if times is None or cost is None else f"{times:.2f}x {cost:6.0f} ns"))


def _bytes(size: int) -> str:
    if size >= 1 << 20:
        return f"{size >> 20} MiB"
    return f"{size // 1024} KiB" if size >= 1024 else f"{size} B"



def print_depths(by_depth: Dict[int, List[Run]]) -> None:
    print(f"daemon ns per sample by stack depth (malloc_churn, 1 thread, dh {DEPTH_INTERVAL}):")
    for depth, runs in by_depth.items():
        print(f"  depth {depth:>3}: {median(runs, lambda r: r.daemon_ns_per_sample):>6.0f} ns "
              f"(deepest stack {max(r.daemon.deepest_stack for r in runs)} frames)")




def client_ns_per_sample(sampled: List[Run], unsampled: List[Run]) -> Optional[float]:
    """The CPU time the client adds to the program's threads per sample: the program's CPU time
    at a sampling interval over that at dh 1e9 (the same hooks, almost nothing sampled), per
    sample, from the medians. The sample's free is part of it."""
    cpu, base = median(sampled, lambda r: r.cpu_ns), median(unsampled, lambda r: r.cpu_ns)
    samples = median(sampled, lambda r: r.daemon and r.daemon.samples)
    if cpu is None or base is None or not samples:
        return None
    return (cpu - base) / samples


@dataclasses.dataclass
class Goal:
    what: str
    goal: str
    now: Optional[str]  # None: not measured in this run
    met: bool = False
    noise: bool = False  # measured, but the cost compared with was within the run's noise


def goals(churn: Dict[str, Dict[int, Dict[str, List[Run]]]],
          programs: Dict[str, Dict[str, List[Run]]],
          by_depth: Dict[int, List[Run]], by_size: Optional[StackRuns] = None,
          instructions: Optional[Dict[str, float]] = None,
          by_live: Optional[Dict[str, List[Run]]] = None) -> List[Goal]:
    """Issues 42's and 56's goals against this run: `churn` by free order ("random", "FIFO"),
    then thread count; `programs` by label, the stack-depth runs by depth, the stack-size runs by
    build and size; `instructions`: a program's whole run under callgrind at dh 4096, a multiple
    of its instructions alone, by label; `by_live`: the live samples runs by column."""
    found: List[Goal] = []

    def elapsed_goal(what: str, by_column, column: str, limit: float, peer: Optional[str] = None,
                     whole: bool = False):
        now = multiple(by_column, column, whole) if by_column else None
        peer_now = multiple(by_column, peer) if by_column and peer else None
        goal = f"<= {limit:g}x" + (f" and below {peer}" if peer else "")
        if now is None:
            found.append(Goal(what, goal, None))
            return
        text = f"{now:.2f}x" + (f" ({peer} {peer_now:.2f}x)" if peer_now is not None else "")
        found.append(Goal(what, goal, text, now <= limit and (
            peer is None or peer_now is None or now < peer_now)))

    for order, by_threads in churn.items():
        for threads, limits in ((1, (1.8, 2.2)), (4, (2.5, 5))):
            label = f"{threads} thread{'s' if threads > 1 else ''} {order}"
            elapsed_goal(f"{label} @4096", by_threads.get(threads), "dh 4096", limits[0])
            elapsed_goal(f"{label} @-i 1", by_threads.get(threads), "dh 1", limits[1],
                         "heaptrack" if threads == 4 else None)
    for name in GOAL_PROGRAMS:
        elapsed_goal(f"{name} @4096", programs.get(name), "dh 4096", 1.05)
        # What the user waits for: start-up and exit included.
        elapsed_goal(f"{name} @4096, whole run", programs.get(name), "dh 4096", 1.05, whole=True)
    # Counted, where elapsed time is the machine's as much as the program's.
    for name, multiple_now in (instructions or {}).items():
        found.append(Goal(f"{name} @4096, instructions", "<= 1.05x", f"{multiple_now:.3f}x",
                          multiple_now <= 1.05))
    one = churn.get("random", {}).get(1)
    client = one and client_ns_per_sample(one.get("dh 4096", []), one.get("dh 1e9", []))
    found.append(Goal("client ns per sample", "<= 150 (1 thread random @4096)",
                      None if client is None else f"{client:.0f}",
                      client is not None and client <= 150))
    daemon = median(by_depth[10], lambda r: r.daemon_ns_per_sample) if 10 in by_depth else None
    found.append(Goal("daemon ns per sample", f"<= 200 (depth 10 @{DEPTH_INTERVAL})",
                      None if daemon is None else f"{daemon:.0f}",
                      daemon is not None and daemon <= 200))
    def flat_goal(what: str, goal: str, large: Optional[float], small: Optional[float]):
        if large is None or small is None:
            found.append(Goal(what, goal, None))
        elif small <= 0:
            # The run's noise was larger than the cost it compares with: no ratio to judge.
            found.append(Goal(what, goal, f"{large:.0f} / {small:.0f} ns", noise=True))
        else:
            found.append(Goal(what, goal, f"{large:.0f} / {small:.0f} ns = {large / small:.2f}x",
                              large / small <= FLAT))

    builds = sorted({build for build, _ in by_size or {}})
    for build in builds:
        for column in STACK_COLUMNS:
            small, large = (ns_per_sample(by_size.get((build, size), {}), column)
                            for size in (STACK_SIZES[0], STACK_SIZES[-1]))
            flat_goal(f"flat, {build} {STACK_COLUMNS[column]}",
                      f"{_bytes(STACK_SIZES[-1])} <= {FLAT}x {_bytes(STACK_SIZES[0])}'s", large,
                      small)
    few, many = (ns_per_sample(by_live or {}, column, base="dh 1e9")
                 for column, _ in LIVE_INTERVALS)
    few_live, many_live = (live_samples(interval) // 1000 for _, interval in LIVE_INTERVALS)
    flat_goal("flat, by live samples", f"{many_live}k <= {FLAT}x {few_live}k's", many, few)
    return found


def print_goals(found: List[Goal]) -> None:
    print(f"{'goals':<30} {'goal':<32} {'now':<22}")
    for g in found:
        verdict = ("not measured" if g.now is None else "within the noise" if g.noise
                   else "met" if g.met else "MISSED")
        print(f"{g.what:<30} {g.goal:<32} {g.now or '-':<22} {verdict}")
