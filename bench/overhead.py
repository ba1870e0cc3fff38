"""What profiling costs the profiled program: its own elapsed time under droidheap (emulated
device, this machine's ABI) and under the peers, as a multiple of the same run unprofiled on glibc,
all measured side by side in one run (medians of --runs runs).

    .venv/bin/python bench/overhead.py [--threads 1,4,8] [--runs 3] [--allocs 2000000]

The workload is bench/programs/malloc_churn.c: per thread ALLOCS allocations of 16..4096 bytes
with 1024 kept live, every other one freed by another thread. Columns, when installed:
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


def elapsed_ns(output: str) -> int:
    found = re.search(r"elapsed_ns=(\d+)", output)
    if found is None:
        raise RuntimeError(f"the workload printed no time:\n{output[-2000:]}")
    return int(found.group(1))


class Runner:
    """Runs one configuration of the workload, in a scratch directory of its own."""

    def __init__(self, work: pathlib.Path, program: pathlib.Path):
        self.work = work
        self.program = program
        self.droidheap = [sys.executable, "-m", "droidheap.cli", "--local"]
        self.env = dict(os.environ, DROIDHEAP_DEVICE_ROOT=str(work / "device"))
        self.count = 0

    def _run(self, argv, env=None) -> int:
        result = subprocess.run(argv, capture_output=True, text=True, env=env or self.env,
                                timeout=1800)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, argv))} failed:\n{result.stderr[-2000:]}")
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,4,8")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--allocs", type=int, default=2_000_000, help="per thread")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="droidheap-overhead-") as tmp:
        work = pathlib.Path(tmp)
        program = work / "malloc_churn"
        subprocess.run(["cc", "-O2", "-pthread", str(PROGRAM), "-o", str(program)], check=True)
        runner = Runner(work, program)
        rows = []
        for threads in [int(t) for t in args.threads.split(",")]:
            workload = [str(program), "-t", str(threads), "-n", str(args.allocs), "-x"]
            medians = {}
            for column, run in runner.configurations(workload):
                times = [run() for _ in range(args.runs)]
                medians[column] = statistics.median(times)
                print(f"  {threads} threads, {column}: {medians[column] / 1e6:.0f} ms "
                      f"(runs: {', '.join(f'{t / 1e6:.0f}' for t in times)})", file=sys.stderr)
            rows.append((threads, medians))
    columns = list(rows[0][1])
    print(f"{'threads':>7} {'glibc ms':>9} " + " ".join(f"{c:>10}" for c in columns[1:]))
    for threads, medians in rows:
        base = medians["glibc"]
        print(f"{threads:>7} {base / 1e6:>9.0f} "
              + " ".join(f"{medians[c] / base:>9.2f}x" for c in columns[1:]))
    per_pair = {threads: (m["dh 1e9"] - m["layer"]) / args.allocs
                for threads, m in rows}
    print("unsampled fast path over the layer alone, ns per malloc+free in each thread: "
          + ", ".join(f"{t} threads {ns:.1f}" for t, ns in per_pair.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
