"""The host side at scale: droidheap's conversion of a large trace, and `report` on its outputs,
beside Perfetto's trace processor reading the same trace, in one run.

    .venv/bin/python bench/host_scale.py [--seconds 4,38,50] [--processes 1] [--keep DIR]
                                         [--traces RAW_TRACE...]

Each trace is made here as a user makes one: `droidheap --local -c 1000 -d MS` on a Python
program that allocates along many different call paths (random recursion through map, sorted,
comprehensions, reduce and str.join, so the native stacks differ) and frees in any order, for
each of --seconds (longer runs make bigger traces) in --processes processes at once (forked,
profiled with --disable-fork-teardown). Then, each timed with its peak RSS (its own, from wait4):

- trace processor: `trace_processor_shell -q` summing the allocations by call site (the engine
  behind ui.perfetto.dev; DROIDHEAP_TRACE_PROCESSOR, else the one scripts/install unpacked);
- droidheap symbolize: the whole conversion a session ends with (symbolization, symbolized trace,
  pprof files, report.html, summary), from the raw trace, with the symbol cache the first
  conversion of the same binaries left ("1st": that first one, the symbol cache empty, every
  module's DWARF read);
- droidheap report, diff (first dump to last) and check: on the converted output.

Printed: the trace's size, dumps and distinct call stacks, each tool's seconds and MB, the ratios
to the trace processor and report.html's size. The goals (issue 39): conversion within 10x the
trace processor's time and 3x its memory; report, diff and check within 3x.
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from droidheap.trace.reader import parse_trace  # noqa: E402

# Allocations along many call paths: each leaf allocates what it is given, and part of it is kept
# in a list whose random slots are replaced (frees in any order).
WORKLOAD = r"""
import functools, os, random, sys, time
sys.setrecursionlimit(10000)
seed = 0
for seed in range(1, int(sys.argv[2])):  # the other processes, forked
    if os.fork() == 0:
        break
else:
    seed = 0
random.seed(seed)
kept = [None] * 4096
def leaf(n):
    block = [random.random() for _ in range(n)] if n % 3 else "x" * (n * 7)
    kept[random.randrange(len(kept))] = block if random.random() < 0.5 else None
    return len(block)
WAYS = [
    lambda depth: step(depth - 1),
    lambda depth: sum(map(lambda _: step(depth - 1), [0])),
    lambda depth: sorted([0], key=lambda _: step(depth - 1))[0],
    lambda depth: [step(depth - 1) for _ in (0,)][0],
    lambda depth: functools.reduce(lambda a, _: a + step(depth - 1), [0], 0),
    lambda depth: len("".join(str(step(depth - 1)) for _ in (0,))),
]
def step(depth):
    if depth <= 0:
        return leaf(random.randrange(1, 200))
    return random.choice(WAYS)(depth)
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    step(random.randrange(1, 9))
if seed == 0:
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
"""


def _run(argv, **kwargs):
    """(seconds, peak MB) of argv, which must succeed; its own peak RSS, from wait4."""
    start = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kwargs)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.monotonic() - start
    err = process.stderr.read().decode(errors="replace")
    process.stderr.close()
    if status != 0:
        raise SystemExit(f"{argv[:3]} failed ({status}):\n{err[-2000:]}")
    return seconds, usage.ru_maxrss / 1024


def _trace_processor() -> pathlib.Path:
    named = os.environ.get("DROIDHEAP_TRACE_PROCESSOR")
    path = pathlib.Path(named) if named else pathlib.Path(sys.prefix) / "bin" / \
        "trace_processor_shell"
    if not path.is_file():
        raise SystemExit(f"no trace processor at {path}: run scripts/install with ../shared/tools "
                         "there, or set DROIDHEAP_TRACE_PROCESSOR")
    return path


def make_trace(work: pathlib.Path, seconds: float, processes: int) -> pathlib.Path:
    """A raw trace of `processes` copies of the workload, each running `seconds`."""
    out = work / f"made-{seconds}s"
    shutil.rmtree(out, ignore_errors=True)
    program = work / "workload.py"
    program.write_text(WORKLOAD)
    # The session remembers the trace as this machine's in the cache the conversions use
    # (made_here.py): only then are the trace's paths, this machine's files, symbolized.
    env = dict(os.environ, DROIDHEAP_DEVICE_ROOT=str(work / "device"),
               DROIDHEAP_CACHE_DIR=str(work / "cache"))
    # The processes past the first are forked children: profiled as processes of their own.
    subprocess.run([sys.executable, "-m", "droidheap.cli", "--local", "-c", "1000",
                    "--disable-fork-teardown", "-o", str(out), "--", sys.executable, str(program),
                    str(seconds), str(processes)], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    return out / "raw-trace"


def shape(trace: pathlib.Path):
    """(dumps, call stacks interned) of a trace, counted in its packets: expanding its samples
    is what the benchmark measures."""
    dumps, stacks, index = set(), 0, 0
    for packet in parse_trace(trace.read_bytes()).packets:
        stacks += len(packet.interned_data.callstacks)
        if packet.HasField("profile_packet"):
            dumps.update((process.pid, index) for process in packet.profile_packet.process_dumps)
            index += not packet.profile_packet.continued  # a dump's last fragment
    return len(dumps), stacks


def shape_in_child(trace: pathlib.Path):
    """shape(), counted in a process of its own: Linux keeps a process's peak RSS across exec, and
    a child started by vfork begins with its parent's, so this process must stay small for the
    peaks that wait4 reports of the tools it starts to be theirs."""
    out = subprocess.run([sys.executable, __file__, "--shape-of", str(trace)], check=True,
                         capture_output=True, text=True).stdout.split()
    return int(out[0]), int(out[1])


def measure(trace: pathlib.Path, work: pathlib.Path, tp: pathlib.Path):
    query = work / "by_callsite.sql"
    query.write_text("select callsite_id, sum(size) as bytes, sum(count) as objects "
                     "from heap_profile_allocation group by callsite_id;\n")
    figures = {"trace processor": _run([str(tp), "-q", str(query), str(trace)])}
    out = work / f"converted-{trace.parent.name}"
    cache = work / "cache"
    env = dict(os.environ, DROIDHEAP_CACHE_DIR=str(cache))
    droidheap = [sys.executable, "-m", "droidheap.cli"]
    # First with an empty symbol cache (what the first conversion of these binaries costs: their
    # DWARF read), then with the cache it left (every later one, a session's as a rule). The
    # rest of the cache stays: it says the trace was made here.
    shutil.rmtree(cache / "symbols", ignore_errors=True)
    for tool in ("droidheap symbolize 1st", "droidheap symbolize"):
        shutil.rmtree(out, ignore_errors=True)
        figures[tool] = _run([*droidheap, "symbolize", str(trace), "-o", str(out)], env=env,
                             cwd=ROOT)
    # On the converted output: what the conversion stored, not the trace again.
    for command in (["report"], ["diff"], ["check", "--max-growth", "1G"]):
        figures[f"droidheap {command[0]}"] = _run([*droidheap, command[0], str(out),
                                                   *command[1:]], env=env, cwd=ROOT)
    return figures, (out / "report.html").stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", default="4,38,50",
                        help="how long each trace's workload runs, comma-separated")
    parser.add_argument("--processes", type=int, default=1,
                        help="workload processes profiled at once")
    parser.add_argument("--traces", type=pathlib.Path, nargs="*", default=[],
                        help="raw traces made before with the same --keep directory, to measure "
                        "instead of new ones")
    parser.add_argument("--keep", type=pathlib.Path,
                        help="a directory to keep the traces and outputs in")
    parser.add_argument("--shape-of", type=pathlib.Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.shape_of:
        print(*shape(args.shape_of))
        return
    tp = _trace_processor()
    work = args.keep or pathlib.Path(tempfile.mkdtemp(prefix="host-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"{'trace':>8} {'dumps':>5} {'stacks':>7}  {'tool':23} {'seconds':>8} {'MB':>7} "
          f"{'x time':>6} {'x MB':>6}")
    try:
        for trace in args.traces or (make_trace(work, float(s), args.processes)
                                     for s in args.seconds.split(",")):
            dumps, stacks = shape_in_child(trace)
            figures, html = measure(trace, work, tp)
            base_s, base_mb = figures["trace processor"]
            size = f"{trace.stat().st_size / 1e6:.1f} MB"
            for tool, (s, mb) in figures.items():
                print(f"{size:>8} {dumps:>5} {stacks:>7}  {tool:23} {s:>8.2f} {mb:>7.0f} "
                      f"{s / base_s:>6.1f} {mb / base_mb:>6.1f}")
            print(f"{'':>26} report.html {html / 1e6:.1f} MB")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
