"""What profiling costs the profiled program, and what the daemon does meanwhile: the program's own
elapsed time and peak RSS under droidheap (emulated device, this machine's ABI) and under the
peers, beside the same run unprofiled on glibc, all measured side by side in one run (medians of
--runs runs, taken in rounds that run every configuration once; a multiple of glibc's is the
median of the rounds' own ratios).

    .venv/bin/python bench/overhead.py [--threads 1,4] [--runs 3] [--allocs 2000000]
                                       [--stack 8192] [--no-programs] [--no-depths]
                                       [--no-stack-sizes] [--no-live] [--no-callgrind]
                                       [--cross-thread-frees] [--orders random,FIFO]

The workloads: bench/programs/malloc_churn.c (per thread ALLOCS allocations of 16..4096 bytes
with 1024 kept live, each new one freeing a random one of them (random) or the oldest (FIFO),
every 1000th kept to the end, each freed by its own thread; with --cross-thread-frees every
other one by another thread; --stack bytes of live stack above the allocating frames, the 1024
slots among them, as a thread's own data), then real allocation-heavy
programs from Debian, each timing its own work and reading its own VmHWM: perl building an
800k-key hash, perl pushing and shifting 2M short strings after freeing such a hash, python3 a
400k-entry dict (its small objects come from pymalloc's own arenas: few reach malloc), sqlite3
inserting 300k rows into a table and indexing them, jq building a 200k-key object. Columns, when
installed:
  glibc      the program alone: the baseline
  layer      the emulation layer alone (bionic's stand-in, no profiling): droidheap's floor
  dh 1e9     droidheap with a 1 GB interval: almost nothing sampled, the unsampled fast path
  dh 32768, dh 4096 (the default), dh 1 (every allocation)
  jemalloc   jemalloc's own profiler at a 4 KiB mean interval (libjemalloc2)
  heaptrack  heaptrack, which records every allocation

Figures:
  cores         how long a cache line takes from one core to another and back
                (bench/programs/line_round_trip.c), before the timed runs and after them: a
                sample costs the client such trips, and virtual machines differ in them
                from day to day
  elapsed       per column, the workload's elapsed time as a multiple of glibc's (the median
                of each round's ratio to glibc's run of that round)
  whole run     per column, each program's time from its fork to its exit (bench/programs/
                whole_run.c, its parent), as a multiple of glibc's: start-up and exit included,
                where the profiler's own costs hide from a program timing its own work (glibc's
                mallinfo once walked perl's 1.6M freed blocks at its exit: 1.6x, unseen)
  fast path     ns per malloc+free that dh 1e9 adds to the layer alone, 1 thread, 32-byte blocks
                (glibc's cheapest path), twice --runs runs each, alternating: the difference of
                the medians and that of the fastest runs (the least disturbed by this machine)
  daemon        per dh column, read from the trace droidheap writes: samples per second reaching
                the daemon (the profiled process's heap_samples over the workload's elapsed
                time; a program's start-up samples count, its start-up time does not), and ns
                per sample the daemon spent draining the process's records (its last dump's
                total_unwinding_time_us / heap_samples: unwinding, and booking the allocations
                and frees; wall time, CLOCK_MONOTONIC, so waiting for a core counts). At dh 1e9
                the few samples carry the cold start (each library's unwind tables read). Then
                from droidheapd's log: its whole CPU time per sample ("cpu ns": start-up,
                unwinding, booking, writing the trace) and its peak RSS in MiB (the shared
                buffer's pages it touched included); last, "client": the CPU time the client
                adds to the program's threads per sample (malloc_churn's CPU time of all its
                threads over dh 1e9's, per sample; the sampled block's free included), and
                "wait": the ms its threads waited for room in the full shared buffer
  peak RSS      the program's VmHWM in MiB, profiler's memory in the process included
  stack depth   daemon ns per sample for malloc_churn, 1 thread, ALLOCS allocations, dh 4096,
                allocating from 10, 30 and 60 nested frames (and the deepest stack booked)
  stack size    malloc_churn, 1 thread, at dh 4096 and dh 1 with 512 B, 8, 32 and 128 KiB of
                live stack above its allocations, built with frame pointers and without: the
                elapsed multiple and the ns each sample adds to glibc's run (issue 56: flat)
  live samples  malloc_churn, 1 thread, 830k 16..256-byte blocks live (107 MiB), then 4M
                allocations more, alone, at dh 1e9, at dh 4096 (27k live samples) and dh 1024
                (110k: past the ~50k the first part of the client's table holds), twice --runs
                rounds: the elapsed multiples and the ns each sample adds to dh 1e9 (flat:
                110k's within 1.3x of 27k's)
  callgrind     instructions per malloc+free the client adds to the layer alone at dh 1e9,
                1 thread, counted by callgrind inside malloc_churn's allocation loop; and
                perl's, python3's and sqlite3's whole runs under the layer alone, at dh 1e9 and
                at dh 4096, in multiples of their instructions alone (what elapsed times, a few
                percent apart run to run, cannot tell)
  custom heap   what a recorded custom heap (droidheap/heaps.h) costs its program: ns per report
                pair (alloc+free, malloc_churn -c: no allocator call) that dh 1e9 --heaps adds
                to the same run unprofiled, 1 and 2 threads, medians of twice --runs runs; and,
                under callgrind, the instructions it adds per pair
  goals         issues 42's and 56's: malloc_churn's elapsed multiple at 1 and 4 threads,
                @4096 and @-i 1, each free order (4 threads @-i 1 also below heaptrack); perl,
                python3 and sqlite3 @4096, their own work and whole runs; the client's CPU ns
                per sample (1 thread, random, @4096) and the daemon's busy ns per sample at
                depth 10, the cost per sample at 128 KiB of stack within 1.3x of that at 512 B,
                and at 110k live samples within 1.3x of 27k's; each met, MISSED, not measured,
                or within the noise (a ratio over a cost the run measured at or below zero)
  samples lost  the dh runs whose trace flags a dump of the program (buffer overran or
                corrupted, guardrail hit, rejected), or that booked fewer samples at dh 1 than
                malloc_churn made allocations; then the runs with unwinding errors
"""
import argparse
import os
import pathlib
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Callable, Dict, List, Optional, Tuple

from overhead_figures import (CUSTOM_HEAP, DEPTH_INTERVAL, DEPTHS, LIVE_CHURN, LIVE_INTERVALS,
                              LIVE_SIZES, LIVE_WINDOW, STACK_COLUMNS, STACK_SIZES, Run, StackRuns,
                              daemon_stats, daemon_usage, goals, parse_run, print_custom_heap,
                              print_daemon_table, print_depths, print_elapsed_table,
                              print_fast_path, print_goals, print_live_samples, print_rss_table,
                              print_stack_sizes, sample_paths)

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "bench" / "programs" / "malloc_churn.c"
WHOLE_RUN = ROOT / "bench" / "programs" / "whole_run.c"
LINE_ROUND_TRIP = ROOT / "bench" / "programs" / "line_round_trip.c"
INCLUDE = ROOT / "ndk_client" / "include"  # droidheap/heaps.h
JEMALLOC = pathlib.Path("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
DROIDHEAP_INTERVALS = [("dh 1e9", 10**9), ("dh 32768", 32768), ("dh 4096", 4096), ("dh 1", 1)]
# Instruction counts barely vary from run to run: one short run is enough.
CALLGRIND_ALLOCS = 200_000
# The programs whose whole run is counted under callgrind too (50x slower: a minute or two each).
CALLGRIND_PROGRAMS = ["perl hash", "python3 dict", "sqlite3 rows"]
FAST_PATH_ALLOCS = 10_000_000
CUSTOM_HEAP_THREADS = [1, 2]

PERL_HASH = ("use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC); "
             "my $t = clock_gettime(CLOCK_MONOTONIC); my %h; $h{\"key$_\"} = $_ for 1..800000; "
             "printf(\"elapsed_ns=%d\\n\", (clock_gettime(CLOCK_MONOTONIC) - $t) * 1e9); "
             "open(my $s, '<', '/proc/self/status'); print grep { /^VmHWM/ } <$s>;")
# The same hash freed, then allocations timed: glibc's mallinfo, which droidheap reads now and then,
# would walk its freed blocks (0.5 s a read).
PERL_FREED_HASH = ("use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC); "
                   "my %h; $h{\"key$_\"} = $_ for 1..800000; undef %h; "
                   "my $t = clock_gettime(CLOCK_MONOTONIC); my @a; "
                   "for my $i (1..2000000) { push @a, \"v$i\"; shift @a if @a > 1000 } "
                   "printf(\"elapsed_ns=%d\\n\", (clock_gettime(CLOCK_MONOTONIC) - $t) * 1e9); "
                   "open(my $s, '<', '/proc/self/status'); print grep { /^VmHWM/ } <$s>;")
PYTHON_DICT = ("import time; t = time.monotonic_ns(); d = {str(i): [i] for i in range(400000)}; "
               "print(f'elapsed_ns={time.monotonic_ns() - t}'); "
               "print(*(l for l in open('/proc/self/status') if l.startswith('VmHWM')), end='')")
SQLITE_ROWS = """.timer on
CREATE TABLE t(a INTEGER, b TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000)
  INSERT INTO t SELECT x, hex(randomblob(16)) FROM c;
CREATE INDEX t_b ON t(b);
.system grep VmHWM /proc/$PPID/status
"""
# jq's clock is gettimeofday's. It reads /proc/self/status (its -R input) only when `inputs` asks,
# after the work.
JQ_OBJECT = ('now as $t | reduce range(200000) as $i ({}; .["key\\($i)"] = [$i]) '
             '| "elapsed_ns=\\((now - $t) * 1e9 | floor)", (inputs | select(startswith("VmHWM")))')
# (name, argv, standard input): programs whose allocator calls dominate, timing themselves.
PROGRAMS = [("perl hash", ["/usr/bin/perl", "-e", PERL_HASH], None),
            ("perl freed hash", ["/usr/bin/perl", "-e", PERL_FREED_HASH], None),
            ("python3 dict", ["/usr/bin/python3", "-c", PYTHON_DICT], None),
            ("sqlite3 rows", ["/usr/bin/sqlite3", ":memory:"], SQLITE_ROWS),
            ("jq object", ["/usr/bin/jq", "-nrR", JQ_OBJECT, "/proc/self/status"], None)]

class Runner:
    """Runs one configuration of the workload, in a scratch directory of its own."""

    def __init__(self, work: pathlib.Path):
        self.work = work
        self.droidheap = [sys.executable, "-m", "droidheap.cli", "--local"]
        self.device_root = work / "device"
        self.env = dict(os.environ, DROIDHEAP_DEVICE_ROOT=str(self.device_root))
        self.count = 0
        self.stdin = None  # what the workload reads
        self.lost_samples: List[str] = []  # "<workload>, <column>: why"
        self.unwinding_errors: List[str] = []

    def run(self, argv, env=None) -> Run:
        result = subprocess.run(argv, capture_output=True, text=True, env=env or self.env,
                                input=self.stdin, timeout=1800)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, argv))} failed:\n{result.stderr[-2000:]}")
        return parse_run(result.stdout)

    def profiled(self, workload, interval: int, options=()) -> Run:
        """The workload under droidheap (with extra `options`), with what the daemon recorded."""
        out = self.scratch()
        run = self.run([*self.droidheap, "-o", out, "-i", str(interval), *options, "--",
                        *workload])
        run.daemon = daemon_stats(out)
        run.daemon.cpu_s, run.daemon.peak_rss_kib = daemon_usage(out)
        run.daemon.logged_samples, run.daemon.matched, run.daemon.unwound = sample_paths(out)
        # At -i 1 every allocation is a sample: fewer samples than the program's own count of its
        # allocations is a loss no flag reported.
        if interval == 1 and run.allocations and run.daemon.samples < run.allocations:
            run.daemon.losses.append(f"{run.allocations - run.daemon.samples} of "
                                     f"{run.allocations} allocations never sampled")
        return run

    def scratch(self) -> pathlib.Path:
        self.count += 1
        return self.work / f"run{self.count}"

    def note_problems(self, what: str, run: Run) -> None:
        if run.daemon and run.daemon.losses:
            self.lost_samples.append(f"{what}: {', '.join(run.daemon.losses)}")
        if run.daemon and run.daemon.unwinding_errors:
            self.unwinding_errors.append(
                f"{what}: {run.daemon.unwinding_errors} of {run.daemon.samples}")

    def configurations(self, workload, intervals=DROIDHEAP_INTERVALS):
        """(column, callable returning a Run) for everything installed here, droidheap at each of
        `intervals` ((column, interval))."""
        yield "glibc", lambda: self.run(workload)
        yield "layer", lambda: self.run([*self.droidheap, "shell", "--", *workload])
        for column, interval in intervals:
            yield column, (lambda i=interval: self.profiled(workload, i))
        if JEMALLOC.exists():
            def jemalloc():
                prefix = self.scratch()
                env = dict(self.env, LD_PRELOAD=str(JEMALLOC),
                           MALLOC_CONF=f"prof:true,lg_prof_sample:12,prof_prefix:{prefix}")
                return self.run(workload, env)
            yield "jemalloc", jemalloc
        if shutil.which("heaptrack"):
            yield "heaptrack", lambda: self.run(
                ["heaptrack", "-o", str(self.scratch() / "heaptrack"), *workload])


def repeat(runner: Runner, what: str, run: Callable[[], Run], runs: int) -> List[Run]:
    """`runs` runs of one configuration, reported on stderr."""
    done = [run() for _ in range(runs)]
    report(runner, what, done)
    return done


def report(runner: Runner, what: str, done: List[Run]) -> None:
    for r in done:
        runner.note_problems(what, r)
    print(f"  {what}: {statistics.median(r.elapsed_ns for r in done) / 1e6:.0f} ms "
          f"(runs: {', '.join(f'{r.elapsed_ns / 1e6:.0f}' for r in done)})", file=sys.stderr)


def measure(runner: Runner, label: str, workload, runs: int, stdin=None,
            columns: Optional[List[str]] = None,
            intervals=DROIDHEAP_INTERVALS) -> Dict[str, List[Run]]:
    """{column: runs} of one workload under every configuration (or those in `columns`), in
    rounds that run each configuration once, in an order drawn anew each round: a slow spell of
    this machine falls on every column alike instead of on one, and so does what a run leaves to
    the next (in a fixed order glibc's runs, each after a profiled one's conversion, came out
    slower than the layer's and droidheap's)."""
    runner.stdin = stdin
    order = random.Random(label)  # the same orders in every run of the benchmark
    try:
        chosen = [(column, run) for column, run in runner.configurations(workload, intervals)
                  if columns is None or column in columns]
        done: Dict[str, List[Run]] = {column: [] for column, _ in chosen}
        for _ in range(runs):
            for column, run in order.sample(chosen, len(chosen)):
                done[column].append(run())
    finally:
        runner.stdin = None
    for column, column_runs in done.items():
        report(runner, f"{label}, {column}", column_runs)
    return done


def measure_depths(runner: Runner, program: pathlib.Path, allocs: int,
                   runs: int) -> Dict[int, List[Run]]:
    """{depth: runs} of malloc_churn, 1 thread, under droidheap, at each stack depth."""
    by_depth = {}
    for depth in DEPTHS:
        workload = [str(program), "-t", "1", "-n", str(allocs), "-d", str(depth)]
        by_depth[depth] = repeat(runner, f"depth {depth}, dh {DEPTH_INTERVAL}",
                                 lambda: runner.profiled(workload, DEPTH_INTERVAL), runs)
    return by_depth


def measure_stack_sizes(runner: Runner, builds: Dict[str, pathlib.Path], allocs: int,
                        runs: int) -> StackRuns:
    """{(build, stack bytes): {column: runs}} of malloc_churn, 1 thread, with that much live stack
    above its allocations, alone and at STACK_COLUMNS, in rounds."""
    found = {}
    for build, program in builds.items():
        for size in STACK_SIZES:
            workload = [str(program), "-t", "1", "-n", str(allocs), "-S", str(size)]
            found[build, size] = measure(runner, f"{build}, {size} B of stack", workload, runs,
                                         columns=["glibc", *STACK_COLUMNS])
    return found


def valgrind_launcher() -> Optional[str]:
    """The program that valgrind's process runs as. Debian's `valgrind` is a shell script that
    execs `valgrind.bin`, which stays the name in /proc/<pid>/cmdline."""
    found = shutil.which("valgrind")
    if found is None:
        return None
    binary = pathlib.Path(found).with_name("valgrind.bin")
    return str(binary) if binary.is_file() else found


def callgrind_instructions(runner: Runner, program: pathlib.Path, arguments=(),
                           options=()) -> Tuple[float, float, int]:
    """(Ir per malloc+free pair of malloc_churn's loop under the layer alone, Ir per pair the client
    adds at dh 1e9, the samples it took meanwhile), from callgrind's counts inside `churn`; with
    malloc_churn's extra `arguments` and droidheap's extra `options`.

    droidheap starts profiling a program by its name, and both sides must agree on it: the daemon
    reads /proc/<pid>/cmdline, where a process under valgrind is valgrind's launcher, while the
    emulated libc in the program reads /proc/self/cmdline, which valgrind rewrites into the
    program's own command line. So `droidheap -- valgrind prog` never loads the client; the
    program runs here through a link named as the launcher."""
    launcher = valgrind_launcher()
    link = runner.work / pathlib.Path(launcher).name
    if not link.exists():
        link.symlink_to(program)

    def command(counts: pathlib.Path):
        return [launcher, "--tool=callgrind", "--toggle-collect=churn",
                f"--callgrind-out-file={counts}", str(link), "-t", "1", "-n",
                str(CALLGRIND_ALLOCS), *arguments]
    layer_counts, client_counts = runner.scratch(), runner.scratch()
    runner.run([*runner.droidheap, "shell", "--", *command(layer_counts)])
    client = runner.profiled(command(client_counts), 10**9, options)
    runner.note_problems(f"callgrind, dh 1e9 {' '.join(options)}", client)
    layer_ir, client_ir = callgrind_total(layer_counts), callgrind_total(client_counts)
    return (layer_ir / CALLGRIND_ALLOCS, (client_ir - layer_ir) / CALLGRIND_ALLOCS,
            client.daemon.samples)


def callgrind_program(runner: Runner, name: str, argv, stdin) -> Tuple[float, float, float]:
    """(the layer alone's, dh 1e9's, dh 4096's) instructions over the program's alone, for a whole
    run of `argv` under callgrind, start and exit included, through a link named as valgrind's
    launcher (callgrind_instructions says why)."""
    launcher = valgrind_launcher()
    place = runner.work / f"callgrind {name}"
    place.mkdir()
    link = place / pathlib.Path(launcher).name
    link.symlink_to(argv[0])
    runner.stdin = stdin
    totals = []
    for column in ("alone", "layer", "dh 1e9", "dh 4096"):
        counts = runner.scratch()
        command = [launcher, "--tool=callgrind", f"--callgrind-out-file={counts}", str(link),
                   *argv[1:]]
        if column == "alone":
            runner.run(command)
        elif column == "layer":
            runner.run([*runner.droidheap, "shell", "--", *command])
        else:
            interval = 10**9 if column == "dh 1e9" else 4096
            runner.note_problems(f"callgrind {name}, {column}",
                                 runner.profiled(command, interval))
        totals.append(callgrind_total(counts))
    runner.stdin = None
    return totals[1] / totals[0], totals[2] / totals[0], totals[3] / totals[0]


def line_round_trip_ns(program: pathlib.Path) -> Optional[int]:
    """The median of three runs of bench/programs/line_round_trip.c, in ns; None where it cannot
    run (fewer than two CPUs)."""
    found = []
    for _ in range(3):
        result = subprocess.run([str(program)], capture_output=True, text=True, timeout=120)
        match = re.search(r"^round_trip_ns=(\d+)$", result.stdout, re.MULTILINE)
        if result.returncode != 0 or match is None:
            return None
        found.append(int(match.group(1)))
    return int(statistics.median(found))


def callgrind_total(counts: pathlib.Path) -> int:
    found = re.search(r"^summary: (\d+)$", counts.read_text(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"{counts} has no summary line")
    return int(found.group(1))


def measure_live_samples(runner: Runner, program: pathlib.Path,
                         runs: int) -> Dict[str, List[Run]]:
    """{column: runs} of malloc_churn, 1 thread, with LIVE_WINDOW small blocks live, alone, at
    dh 1e9 and at LIVE_INTERVALS, in twice `runs` rounds: a sample's cost is the difference of two
    runs' times, a few percent apart from run to run."""
    workload = [str(program), "-t", "1", "-n", str(LIVE_WINDOW + LIVE_CHURN), "-w",
                str(LIVE_WINDOW), "-s", f"{LIVE_SIZES[0]}:{LIVE_SIZES[1]}", "-k", "0"]
    intervals = [("dh 1e9", 10**9), *LIVE_INTERVALS]
    return measure(runner, "live samples", workload, 2 * runs,
                   columns=["glibc", *(column for column, _ in intervals)], intervals=intervals)


def measure_fast_path(runner: Runner, program: pathlib.Path,
                      runs: int) -> Tuple[Dict[str, List[Run]], int]:
    """The layer alone and dh 1e9 on the cheapest allocator calls there are, 32-byte blocks that
    glibc serves from its per-thread cache, 1 thread: the client's unsampled path is then the
    largest share of the pair it can be. (The runs, allocations per run.)"""
    allocs = FAST_PATH_ALLOCS
    workload = [str(program), "-t", "1", "-n", str(allocs), "-s", "32:32", "-w", "64"]
    return measure(runner, "fast path", workload, runs * 2, columns=["layer", "dh 1e9"]), allocs


def measure_custom_heap(runner: Runner, program: pathlib.Path,
                        runs: int) -> Tuple[Dict[int, Dict[str, List[Run]]], int]:
    """{threads: {"alone" | "dh 1e9": runs}} of malloc_churn -c, the report pairs alone, unprofiled
    (the header's check of an unrecorded heap) and with the heap recorded at dh 1e9, alternating
    (the allocations per thread and run)."""
    allocs = FAST_PATH_ALLOCS
    by_threads = {}
    for threads in CUSTOM_HEAP_THREADS:
        workload = [str(program), "-t", str(threads), "-n", str(allocs), "-s", "32:32", "-w",
                    "64", "-c", CUSTOM_HEAP]
        done: Dict[str, List[Run]] = {"alone": [], "dh 1e9": []}
        for _ in range(runs * 2):
            done["alone"].append(runner.run(workload))
            done["dh 1e9"].append(runner.profiled(workload, 10**9, ["--heaps", CUSTOM_HEAP]))
        for column, column_runs in done.items():
            report(runner, f"custom heap, {threads} threads, {column}", column_runs)
        by_threads[threads] = done
    return by_threads, allocs


def _orders(value: str) -> str:
    if not value or any(order not in ("random", "FIFO") for order in value.split(",")):
        raise argparse.ArgumentTypeError("random, FIFO or random,FIFO")
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,4")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--allocs", type=int, default=2_000_000, help="per thread")
    parser.add_argument("--stack", type=int, default=8192,
                        help="bytes of live stack above malloc_churn's allocations (issue 56's "
                             "goals are at 8 KiB)")
    parser.add_argument("--no-programs", action="store_true", help="malloc_churn only")
    parser.add_argument("--no-depths", action="store_true", help="skip the stack depth runs")
    parser.add_argument("--no-stack-sizes", action="store_true",
                        help="skip the runs at each size of live stack")
    parser.add_argument("--no-live", action="store_true",
                        help="skip the runs at 27k and 110k live samples")
    parser.add_argument("--no-callgrind", action="store_true", help="skip the callgrind runs")
    parser.add_argument("--cross-thread-frees", action="store_true",
                        help="malloc_churn -x: half the frees on another thread")
    parser.add_argument("--orders", default="random,FIFO", type=_orders,
                        help="which blocks malloc_churn frees: a random slot's (as programs "
                             "do), the oldest (FIFO), or both (random,FIFO)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="droidheap-overhead-") as tmp:
        work = pathlib.Path(tmp)
        program = work / "malloc_churn"
        framed = work / "malloc_churn_fp"
        for output, flags in ((program, []), (framed, ["-fno-omit-frame-pointer"])):
            subprocess.run(["cc", "-O2", *flags, "-pthread", f"-I{INCLUDE}", str(PROGRAM), "-o",
                            str(output)], check=True)
        whole_run = work / "whole_run"
        subprocess.run(["cc", "-O2", str(WHOLE_RUN), "-o", str(whole_run)], check=True)
        round_trip = work / "line_round_trip"
        subprocess.run(["cc", "-O2", "-pthread", str(LINE_ROUND_TRIP), "-o", str(round_trip)],
                       check=True)
        round_trips = [line_round_trip_ns(round_trip)]
        runner = Runner(work)
        churn: Dict[str, Dict[int, dict]] = {}
        for order in args.orders.split(","):
            churn[order] = {}
            for threads in [int(t) for t in args.threads.split(",")]:
                workload = [str(program), "-t", str(threads), "-n", str(args.allocs),
                            "-S", str(args.stack), *(["-x"] if args.cross_thread_frees else []),
                            *(["-f"] if order == "FIFO" else [])]
                churn[order][threads] = measure(runner, f"{threads} threads {order}", workload,
                                                args.runs)
        programs = []
        if not args.no_programs:
            for name, argv, stdin in PROGRAMS:
                if os.path.exists(argv[0]):
                    programs.append((name, measure(runner, name, [str(whole_run), *argv],
                                                   args.runs, stdin)))
        by_depth = {} if args.no_depths else measure_depths(runner, program, args.allocs,
                                                            args.runs)
        by_size = {} if args.no_stack_sizes else measure_stack_sizes(
            runner, {"no frame pointers": program, "frame pointers": framed}, args.allocs,
            args.runs)
        by_live = {} if args.no_live else measure_live_samples(runner, program, args.runs)
        fast_path = measure_fast_path(runner, program, args.runs)
        custom_heap = measure_custom_heap(runner, program, args.runs)
        round_trips.append(line_round_trip_ns(round_trip))
        callgrind = custom_callgrind = None
        programs_callgrind = []
        if not args.no_callgrind and valgrind_launcher():
            callgrind = callgrind_instructions(runner, program)
            custom_callgrind = callgrind_instructions(
                runner, program, ["-s", "32:32", "-w", "64", "-c", CUSTOM_HEAP],
                ["--heaps", CUSTOM_HEAP])
            programs_callgrind = [(name, callgrind_program(runner, name, argv, stdin))
                                  for name, argv, stdin in PROGRAMS
                                  if name in CALLGRIND_PROGRAMS and not args.no_programs
                                  and os.path.exists(argv[0])]

    if None not in round_trips:
        print("cores: a cache line from one core to another and back in {} ns at the start, {} ns "
              "after the timed runs (line_round_trip.c)\n".format(*round_trips))
    churn_rows = [(f"{threads} threads {order}", runs) for order, by_threads in churn.items()
                  for threads, runs in by_threads.items()]
    print_elapsed_table("malloc_churn", churn_rows)
    print_fast_path(*fast_path)
    print_custom_heap(*custom_heap)
    if programs:
        print()
        print_elapsed_table("program", programs)
        print()
        print_elapsed_table("whole run", programs, whole=True)
    print()
    print_daemon_table(churn_rows + programs)
    print()
    print_rss_table(churn_rows + programs)
    if by_depth:
        print()
        print_depths(by_depth)
    if by_size:
        print()
        print_stack_sizes(by_size)
    if by_live:
        print()
        print_live_samples(by_live)
    if callgrind:
        layer, added, samples = callgrind
        print(f"\nunsampled fast path under callgrind (1 thread, dh 1e9, {samples} sampled): "
              f"{added:.1f} instructions per malloc+free over the layer alone's {layer:.1f}")
    if custom_callgrind:
        alone, added, _ = custom_callgrind
        print(f"custom heap reports under callgrind (1 thread, dh 1e9 --heaps {CUSTOM_HEAP}): "
              f"{added:.1f} instructions per report pair over {alone:.1f} unprofiled")
    for name, (layer, unsampled, sampled) in programs_callgrind:
        print(f"{name} under callgrind, whole run: layer {layer:.4f}x, dh 1e9 {unsampled:.4f}x, "
              f"dh 4096 {sampled:.4f}x its instructions alone")
    print(f"\ngoals, malloc_churn: {args.allocs} allocations of 16..4096 B per thread, 1024 live "
          "(a random one freed, or with FIFO the oldest), every 1000th kept to the end, "
          f"{'half' if args.cross_thread_frees else 'none'} freed on another thread, "
          f"{args.stack} B of live stack above the allocations")
    print_goals(goals(churn, dict(programs), by_depth, by_size,
                      {name: sampled for name, (_, _, sampled) in programs_callgrind}, by_live))
    print()
    print("samples lost: " + ("; ".join(runner.lost_samples) or "none"))
    print("unwinding errors: " + ("; ".join(runner.unwinding_errors) or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
