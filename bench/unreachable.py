"""What looking for unreachable memory costs (droidheap --unreachable, issue 54), beside
LeakSanitizer's exit check of the same program: bench/programs/reachable_heap.c builds a heap of
MIB MiB (blocks of 16..4096 bytes, each pointing at a random earlier one, every tenth dropped) and
then, in a thread, allocates and frees (random order) as it reads the clock for --seconds,
printing the longest gap it saw: a program goes on allocating while it is swept, and a stall of
its records' reader stalls it too. Each size runs
alone, under droidheap --unreachable with a dump every second (each dump holds the program's
threads while it forks the copy that is swept), and built with -fsanitize=leak, with and without
its exit check.

    .venv/bin/python bench/unreachable.py [--sizes 256,1024] [--seconds 3] [--interval 4096]

Figures, per heap size:
  gap alone      the program's longest gap without a profiler (its own noise)
  gap swept      the longest gap with droidheap sweeping: the stall it sees (goal: <= 250 ms at
                 1 GiB)
  held           droidheapd's longest hold of the threads (stop + fork + release), from its lines
  sweep          droidheapd's sweep time per GiB it read (roots and blocks), the slowest dump's
  LSan exit      LeakSanitizer's exit check: the -fsanitize=leak build's elapsed time with the
                 check minus without it (median of 3 each)
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
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCE = ROOT / "bench" / "programs" / "reachable_heap.c"
GAP = re.compile(r"longest_gap_us (\d+)")
SWEEP = re.compile(r"unreachable: .* held (\d+) us, (\d+) KiB read in (\d+) ms")


def build(out: pathlib.Path, sanitize: bool) -> pathlib.Path:
    program = out / ("reachable_heap_lsan" if sanitize else "reachable_heap")
    subprocess.run(["cc", "-O2", "-g", "-pthread", *(["-fsanitize=leak"] if sanitize else []),
                    str(SOURCE), "-o", str(program)], check=True)
    return program


def droidheap() -> str:
    found = pathlib.Path(sys.executable).with_name("droidheap")
    return str(found) if found.exists() else shutil.which("droidheap") or "droidheap"


def run_alone(program, mib, seconds) -> int:
    out = subprocess.run([str(program), str(mib), str(seconds)], capture_output=True, text=True,
                         check=True).stdout
    return int(GAP.search(out).group(1))


def run_swept(program, mib, seconds, interval, work) -> tuple:
    """(the program's longest gap in us, droidheapd's longest hold in us, slowest sweep ms/GiB)."""
    result = subprocess.run([droidheap(), "--local", "--unreachable", "-c", "1000", "-i",
                             str(interval), "-o", str(work / f"out-{mib}"), "--", str(program),
                             str(mib), str(seconds)], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"droidheap failed: {result.stderr.strip().splitlines()[-1:]}")
    sweeps = [(int(held), int(kib), int(ms)) for held, kib, ms in SWEEP.findall(result.stderr)]
    if not sweeps:
        sys.exit(f"no sweep was reported: {result.stderr[-500:]}")
    held = max(s[0] for s in sweeps)
    per_gib = max(ms / (kib / (1 << 20)) for _, kib, ms in sweeps if kib)
    return int(GAP.search(result.stdout).group(1)), held, per_gib


def lsan_exit_ms(program, mib, seconds) -> float:
    def elapsed(check: bool) -> float:
        start = time.monotonic()
        subprocess.run([str(program), str(mib), str(seconds)], capture_output=True,
                       env=dict(os.environ, LSAN_OPTIONS=f"detect_leaks={int(check)}"))
        return time.monotonic() - start
    with_check = statistics.median(elapsed(True) for _ in range(3))
    without = statistics.median(elapsed(False) for _ in range(3))
    return max(0.0, with_check - without) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="256,1024", help="heap sizes in MiB (256,1024)")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="how long the program watches the clock (3)")
    parser.add_argument("--interval", type=int, default=4096, help="sampling interval (4096)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="droidheap-unreachable-") as tmp:
        work = pathlib.Path(tmp)
        program = build(work, sanitize=False)
        try:
            lsan = build(work, sanitize=True)
        except subprocess.CalledProcessError:
            lsan = None
        print(f"{'heap':>8} {'gap alone':>10} {'gap swept':>10} {'held':>9} {'sweep':>12} "
              f"{'LSan exit':>10}")
        for mib in (int(size) for size in args.sizes.split(",")):
            alone = run_alone(program, mib, args.seconds)
            gap, held, per_gib = run_swept(program, mib, args.seconds, args.interval, work)
            exit_ms = f"{lsan_exit_ms(lsan, mib, args.seconds):8.0f}ms" if lsan else "   no LSan"
            print(f"{mib:>5}MiB {alone / 1000:8.1f}ms {gap / 1000:8.1f}ms {held / 1000:7.1f}ms "
                  f"{per_gib:7.0f}ms/GiB {exit_ms}")
            if mib >= 1024:
                print(f"  goal, stall <= 250 ms at {mib} MiB: "
                      f"{'met' if gap <= 250_000 else 'MISSED'}")


if __name__ == "__main__":
    main()
