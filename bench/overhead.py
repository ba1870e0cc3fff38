"""What profiling costs the profiled program: its own elapsed time under droidheap (emulated
device, this machine's ABI) and under the peers, as a multiple of the same run unprofiled on glibc,
all measured side by side in one run (medians of --runs runs).

    .venv/bin/python bench/overhead.py [--threads 1,4,8] [--runs 3] [--allocs 2000000]
                                       [--no-programs]

The workloads: bench/programs/malloc_churn.c (per thread ALLOCS allocations of 16..4096 bytes
with 1024 kept live, every other one freed by another thread), then real allocation-heavy
programs from Debian, each timing its own work: perl building an 800k-key hash, python3 a
400k-entry dict, sqlite3 inserting 300k rows into a table and indexing them. Columns, when
installed:
  layer      the emulation layer alone (bionic's stand-in, no profiling): droidheap's floor
  dh 1e9     droidheap with a 1 GB interval: almost nothing sampled, the unsampled fast path
  dh 32768, dh 4096 (the default), dh 1 (every allocation)
  jemalloc   jemalloc's own profiler at a 4 KiB mean interval (libjemalloc2)
  heaptrack  heaptrack, which records every allocation
"""
import argparse
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "bench" / "programs" / "malloc_churn.c"
JEMALLOC = pathlib.Path("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
DROIDHEAP_INTERVALS = [("dh 1e9", 10**9), ("dh 32768", 32768), ("dh 4096", 4096), ("dh 1", 1)]


PERL_HASH = ("use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC); "
             "my $t = clock_gettime(CLOCK_MONOTONIC); my %h; $h{\"key$_\"} = $_ for 1..800000; "
             "printf(\"elapsed_ns=%d\\n\", (clock_gettime(CLOCK_MONOTONIC) - $t) * 1e9);")
PYTHON_DICT = ("import time; t = time.monotonic_ns(); d = {str(i): [i] for i in range(400000)}; "
               "print(f'elapsed_ns={time.monotonic_ns() - t}')")
SQLITE_ROWS = """.timer on
CREATE TABLE t(a INTEGER, b TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000)
  INSERT INTO t SELECT x, hex(randomblob(16)) FROM c;
CREATE INDEX t_b ON t(b);
"""
# (name, argv, standard input): programs whose allocator calls dominate, timing themselves.
PROGRAMS = [("perl hash", ["/usr/bin/perl", "-e", PERL_HASH], None),
            ("python3 dict", ["/usr/bin/python3", "-c", PYTHON_DICT], None),
            ("sqlite3 rows", ["/usr/bin/sqlite3", ":memory:"], SQLITE_ROWS)]


def elapsed_ns(output: str) -> int:
    """The time a workload says its work took: an `elapsed_ns=N` line, or the sum of sqlite3's
    `.timer` lines."""
    found = re.search(r"elapsed_ns=(\d+)", output)
    if found is not None:
        return int(found.group(1))
    sqlite = re.findall(r"Run Time: real ([0-9.]+)", output)
    if sqlite:
        return int(sum(float(t) for t in sqlite) * 1e9)
    raise RuntimeError(f"the workload printed no time:\n{output[-2000:]}")


class Runner:
    """Runs one configuration of the workload, in a scratch directory of its own."""

    def __init__(self, work: pathlib.Path):
        self.work = work
        self.droidheap = [sys.executable, "-m", "droidheap.cli", "--local"]
        self.env = dict(os.environ, DROIDHEAP_DEVICE_ROOT=str(work / "device"))
        self.count = 0
        self.lost_samples = []  # configurations whose profile says samples were lost
        self.stdin = None  # what the workload reads

    def _run(self, argv, env=None) -> int:
        result = subprocess.run(argv, capture_output=True, text=True, env=env or self.env,
                                input=self.stdin, timeout=1800)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, argv))} failed:\n{result.stderr[-2000:]}")
        if "samples were lost" in result.stdout + result.stderr:
            self.lost_samples.append(" ".join(map(str, argv)))
        return elapsed_ns(result.stdout)

    def _scratch(self) -> pathlib.Path:
        self.count += 1
        return self.work / f"run{self.count}"

    def configurations(self, workload):
        """(column, callable returning elapsed ns) for everything installed here."""
        yield "glibc", lambda: self._run(workload)
        yield "layer", lambda: self._run([*self.droidheap, "shell", "--", *workload])
        for column, interval in DROIDHEAP_INTERVALS:
            yield column, (lambda i=interval: self._run(
                [*self.droidheap, "-o", self._scratch(), "-i", str(i), "--", *workload]))
        if JEMALLOC.exists():
            def jemalloc():
                prefix = self._scratch()
                env = dict(self.env, LD_PRELOAD=str(JEMALLOC),
                           MALLOC_CONF=f"prof:true,lg_prof_sample:12,prof_prefix:{prefix}")
                return self._run(workload, env)
            yield "jemalloc", jemalloc
        if shutil.which("heaptrack"):
            yield "heaptrack", lambda: self._run(
                ["heaptrack", "-o", str(self._scratch() / "heaptrack"), *workload])


def measure(runner: Runner, label: str, workload, runs: int, stdin=None):
    """{column: median elapsed ns} of one workload under every configuration."""
    runner.stdin = stdin
    medians = {}
    for column, run in runner.configurations(workload):
        times = [run() for _ in range(runs)]
        medians[column] = statistics.median(times)
        print(f"  {label}, {column}: {medians[column] / 1e6:.0f} ms "
              f"(runs: {', '.join(f'{t / 1e6:.0f}' for t in times)})", file=sys.stderr)
    return medians


def print_table(title: str, rows) -> None:
    columns = list(rows[0][1])
    print(f"{title:>14} {'glibc ms':>9} " + " ".join(f"{c:>10}" for c in columns[1:]))
    for label, medians in rows:
        base = medians["glibc"]
        print(f"{label:>14} {base / 1e6:>9.0f} "
              + " ".join(f"{medians[c] / base:>9.2f}x" for c in columns[1:]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,4,8")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--allocs", type=int, default=2_000_000, help="per thread")
    parser.add_argument("--no-programs", action="store_true", help="malloc_churn only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="droidheap-overhead-") as tmp:
        work = pathlib.Path(tmp)
        program = work / "malloc_churn"
        subprocess.run(["cc", "-O2", "-pthread", str(PROGRAM), "-o", str(program)], check=True)
        runner = Runner(work)
        churn = []
        for threads in [int(t) for t in args.threads.split(",")]:
            workload = [str(program), "-t", str(threads), "-n", str(args.allocs), "-x"]
            churn.append((f"{threads} threads", measure(runner, f"{threads} threads", workload,
                                                        args.runs)))
        programs = []
        if not args.no_programs:
            for name, argv, stdin in PROGRAMS:
                if os.path.exists(argv[0]):
                    programs.append((name, measure(runner, name, argv, args.runs, stdin)))
    print_table("malloc_churn", churn)
    per_pair = {label: (m["dh 1e9"] - m["layer"]) / args.allocs for label, m in churn}
    print("unsampled fast path over the layer alone, ns per malloc+free in each thread: "
          + ", ".join(f"{label} {ns:.1f}" for label, ns in per_pair.items()))
    if programs:
        print()
        print_table("program", programs)
    print("samples lost: " + ("; ".join(runner.lost_samples) if runner.lost_samples else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
