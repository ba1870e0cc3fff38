"""droidheap's root mode against Google's own heapprofd, on an Android test device
(scripts/test_adbd): Android 10's arm64 userland under qemu-user, or Android 11's x86_64 one,
natively (--android android11): what each costs the profiled program, how exact its per-site bytes
are, what it loses, and what its daemon takes.

    .venv/bin/python bench/versus_heapprofd.py [--android android10] [--runs 3] [--allocs N]
                                               [--intervals 4096,1] [--stacks 8192]
                                               [--frame-pointers]
                                               [--workloads 'alloc_sites 4t,...'] [--keep DIR]

The same Android builds for both (tests/android.py, linked --no-rosegment: Android 10's heapprofd
cannot unwind lld's API-29 layout), started the same way: each profiler's session is opened for
the program's name (`droidheap -n`, `droidheap --mode platform -n`), and once the device's
heapprofd.enable.<name> property says so the program is started by `adb shell`, then the session
is ended (SIGINT) after it exits. The workloads: bench/programs/malloc_churn.c, 1 and 4 threads
(ALLOCS allocations shared among them, half freed by another thread, with each of --stacks bytes
of live stack above them; with --frame-pointers also built -fno-omit-frame-pointer, as
malloc_churn_fp), timing itself; and
tests/programs/alloc_sites.c, --threads 1 and 4, and tests/programs/libc_sites.cc (C++ through
Android's libc++, libc's strdup and qsort, a deep recursion), whose exact bytes per site are in
tests/e2e/expected_sites.py, timed on the device from its start to its "done" line (it then goes
on freeing a little for --linger-freeing: Android 10's heapprofd books nothing past a client's
last free). Each round runs the program unprofiled, under droidheap, under heapprofd; the figures
are medians of --runs rounds.

Columns, per workload, threads and interval (the same for both profilers):
  time x       the program's time as a multiple of its unprofiled runs'
  max err %    the largest |error| of a site's allocated bytes against the exact ones (each site's
               median over the runs), over the sites the profiler booked, and how many of them it
               booked (in the run that booked fewest); droidheap's error is held against
               heapprofd's over the sites both booked. The notes name the sites off by more
               than sampling explains (tests/e2e/expected_sites.py sampling_bound, 5 sigma)
  lost         runs whose profile of the program is missing, or that at -i 1 booked fewer samples
               than malloc_churn made allocations
  cpu s        the daemon's CPU time: droidheapd's whole life (from its log), heapprofd's (a
               long-running service) across the program's run and the dump at its exit
  RSS MiB      the daemon's peak RSS: droidheapd's (its log); heapprofd's VmHWM, reset to its RSS
               as the session starts (/proc/<pid>/clear_refs). On Android 10 both daemons run
               under qemu-user, whose own memory counts in both.
"""
import argparse
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from droidheap import native  # noqa: E402
from overhead import daemon_usage  # noqa: E402
from tests.e2e.trace_check import totals_by_leaf_function  # noqa: E402
from versus_figures import (CLOCK_TICKS_PER_S, DROIDHEAP, HEAPPROFD, PROFILERS,  # noqa: E402
                            Cell, Run, TraceSummary, Workload, format_table, parse_cpu_ticks,
                            parse_program_output, parse_vmhwm_kib, site_accuracy,
                            summarize_trace, workloads)

DEVICE_DIR = "/data/local/tmp"
CHURN_SOURCE = ROOT / "bench" / "programs" / "malloc_churn.c"
FRAMED_CHURN = "malloc_churn_fp"  # built with -fno-omit-frame-pointer
SITES_SOURCE = ROOT / "tests" / "programs" / "alloc_sites.c"
CXX_SITES_SOURCE = ROOT / "tests" / "programs" / "libc_sites.cc"
SESSION_TIMEOUT_S = 120
# Now and then (a loaded machine) perfetto's session writes an empty trace before heapprofd is
# enabled; a session that ends before the program could start is started again.
SESSION_ATTEMPTS = 3
PROGRAM_TIMEOUT_S = 300
# malloc_churn's allocations: under qemu-user tens of thousands already take a second; natively a
# million take about as long.
QEMU_ALLOCS = 40000
NATIVE_ALLOCS = 1000000


class Device:
    """The Android test device on its own adb server, both started here and stopped by close()."""

    def __init__(self, release):
        from tests.adb.conftest import ADB_BINARIES, AdbServer, free_port, start_test_adbd
        if not release.rootfs.is_file():
            raise RuntimeError(f"no {release.rootfs}: the Android test device cannot start")
        self.server = AdbServer(ADB_BINARIES["adb36"], free_port(), native.installed_bin_dir())
        self.adbd = None
        try:
            self.server.adb("start-server")
            self.adbd = start_test_adbd(root=True, android=release)
            self.serial = self.server.connect(self.adbd)
        except BaseException:
            self.close()
            raise
        self.env = {**{k: v for k, v in os.environ.items() if k != "ANDROID_SERIAL"},
                    **self.server.env}

    def close(self) -> None:
        if self.adbd is not None:
            self.server.adb("disconnect", self.adbd.serial, check=False)
            self.adbd.stop()
        self.server.adb("kill-server", check=False)

    def shell(self, script: str, timeout: float = 30) -> str:
        return subprocess.run([str(self.server.binary), "-s", self.serial, "shell", script],
                              env=self.env, capture_output=True, text=True,
                              timeout=timeout).stdout

    def push(self, local: pathlib.Path, remote: str) -> None:
        self.server.adb("-s", self.serial, "push", str(local), remote)


class SessionNotStarted(RuntimeError):
    pass


class Bench:
    """Runs the workloads on the device in each configuration; each run's files in `work`."""

    def __init__(self, device: Device, work: pathlib.Path, binaries: Dict[str, pathlib.Path]):
        self.device = device
        self.work = work
        self.binaries = binaries  # device program name: the host copy (for symbols)
        self.count = 0
        self.restarts: List[str] = []  # "<profiler>, <workload>: the session's last words"

    def run_program(self, workload: Workload) -> Run:
        """One run started by adb shell, each line stamped with the device's clock."""
        command = " ".join([f"{DEVICE_DIR}/{workload.program}", *workload.args])
        output = self.device.shell(
            f's=$(date +%s%N); {command} | while read l; do echo "$(date +%s%N) $l"; done; '
            f'echo "start_ns=$s"', timeout=PROGRAM_TIMEOUT_S)
        return Run(*parse_program_output(output))

    def start_session(self, workload: Workload, profiler: str, interval: int,
                      out: pathlib.Path) -> subprocess.Popen:
        """A session for the program's name, once the device would profile it."""
        mode = ["--mode", "platform"] if profiler == HEAPPROFD else []
        log = out.with_name(f"{out.name}.log")
        for attempt in range(1, SESSION_ATTEMPTS + 1):
            with log.open("w") as log_file:
                session = subprocess.Popen(
                    [sys.executable, "-m", "droidheap.cli", "-s", self.device.serial, *mode,
                     "-n", workload.program, "-i", str(interval), "-o", str(out)],
                    stdout=log_file, stderr=subprocess.STDOUT, env=self.device.env, cwd=ROOT,
                    start_new_session=True)
            try:
                self.wait_for_session(workload.program, session, log)
                return session
            except SessionNotStarted as e:
                if attempt == SESSION_ATTEMPTS:
                    raise
                self.restarts.append(f"{profiler}, {workload.label}, -i {interval}: "
                                     f"{str(e).splitlines()[-1]}")
                shutil.rmtree(out, ignore_errors=True)
                time.sleep(2)

    def profiled(self, workload: Workload, profiler: str, interval: int) -> Run:
        self.count += 1
        out = self.work / f"run{self.count}-{profiler}"
        session = self.start_session(workload, profiler, interval, out)
        try:
            heapprofd = self.heapprofd_usage_start() if profiler == HEAPPROFD else None
            run = self.run_program(workload)
            if heapprofd is not None:
                run.daemon_cpu_s, run.daemon_rss_kib = self.heapprofd_usage_end(*heapprofd)
            session.send_signal(signal.SIGINT)
            session.wait(timeout=SESSION_TIMEOUT_S)
        finally:
            if session.poll() is None:
                session.kill()
                session.wait()
        trace = out / "raw-trace"
        if not trace.exists():  # the session ended without a trace: no dump at all
            run.trace = TraceSummary(None)
            return run
        run.trace = summarize_trace(trace.read_bytes())
        if profiler == DROIDHEAP:
            run.daemon_cpu_s, run.daemon_rss_kib = daemon_usage(out)
        if workload.exact and run.trace.pid is not None:
            booked = totals_by_leaf_function(trace, self.binaries[workload.program], "site_")
            run.accuracy = site_accuracy(booked.get(run.trace.pid, {}), workload.exact, interval)
        return run

    def wait_for_session(self, name: str, session: subprocess.Popen, log: pathlib.Path) -> None:
        """Until the device's bionic would load a client into a process called `name`."""
        deadline = time.monotonic() + SESSION_TIMEOUT_S
        while self.device.shell(f"getprop heapprofd.enable.{name}").strip() != "1":
            if session.poll() is not None:
                raise SessionNotStarted(f"the session for {name} ended before it started:\n"
                                        f"{log.read_text().strip()[-2000:]}")
            if time.monotonic() > deadline:
                session.kill()
                session.wait()
                raise RuntimeError(f"the session for {name} did not start in "
                                   f"{SESSION_TIMEOUT_S} s:\n{log.read_text()[-2000:]}")
            time.sleep(0.2)

    def heapprofd_usage_start(self) -> Tuple[str, int]:
        """(heapprofd's pid, its CPU ticks) as the session starts, its peak RSS reset."""
        deadline = time.monotonic() + SESSION_TIMEOUT_S
        while not (pid := self.device.shell("pidof heapprofd").strip()):
            if time.monotonic() > deadline:
                raise RuntimeError("heapprofd did not start")
            time.sleep(0.2)
        failed = self.device.shell(f"{{ echo 5 > /proc/{pid}/clear_refs; }} 2>&1").strip()
        if failed:
            raise RuntimeError(f"heapprofd's peak RSS cannot be reset: {failed}")
        return pid, parse_cpu_ticks(self.device.shell(f"cat /proc/{pid}/stat"))

    def heapprofd_usage_end(self, pid: str, start_ticks: int) -> Tuple[float, int]:
        """(CPU seconds since the start, peak RSS KiB), once heapprofd is done with the program:
        its CPU time has stopped growing (the dump at the program's exit written)."""
        ticks, deadline = None, time.monotonic() + SESSION_TIMEOUT_S
        while time.monotonic() < deadline:
            now = parse_cpu_ticks(self.device.shell(f"cat /proc/{pid}/stat"))
            if now == ticks:
                break
            ticks = now
            time.sleep(1)
        rss = parse_vmhwm_kib(self.device.shell(f"cat /proc/{pid}/status"))
        return (ticks - start_ticks) / CLOCK_TICKS_PER_S, rss




def measure(bench: Bench, workload: Workload, interval: int, runs: int) -> Cell:
    """Rounds of unprofiled, droidheap, heapprofd: a slow spell of this machine (qemu, other
    jobs) falls on each alike."""
    cell: Cell = {"unprofiled": [], DROIDHEAP: [], HEAPPROFD: []}
    for _ in range(runs):
        cell["unprofiled"].append(bench.run_program(workload))
        for profiler in PROFILERS:
            cell[profiler].append(bench.profiled(workload, profiler, interval))
    for column, done in cell.items():
        print(f"  {workload.label}, -i {interval}, {column}: "
              f"{', '.join(f'{r.elapsed_ns / 1e6:.0f}' for r in done)} ms", file=sys.stderr)
    return cell



# ---- main ------------------------------------------------------------------------------------

def build_programs(work: pathlib.Path, abi: str) -> Dict[str, pathlib.Path]:
    """The Android builds both profilers run, linked --no-rosegment (see the module's doc);
    malloc_churn also with frame pointers (FRAMED_CHURN)."""
    from tests.android import compile_android_program
    built = {}
    for name, source, cflags in ((CHURN_SOURCE.stem, CHURN_SOURCE, ()),
                                 (FRAMED_CHURN, CHURN_SOURCE, ("-fno-omit-frame-pointer",)),
                                 (SITES_SOURCE.stem, SITES_SOURCE, ()),
                                 (CXX_SITES_SOURCE.stem, CXX_SITES_SOURCE, ())):
        built[name] = compile_android_program(
            source, work / name, abi, rosegment=False,
            include_dirs=[ROOT / "ndk_client" / "include"], cflags=cflags)
    return built


def _terminate(signum, frame):
    raise SystemExit(f"versus_heapprofd: stopped by signal {signum}")


def main() -> int:
    # So that a kill (or a timeout) still stops the device and the adb server, in `finally`.
    signal.signal(signal.SIGTERM, _terminate)
    from tests.android import RELEASES
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--android", choices=sorted(RELEASES), default="android10",
                        help="the test device's userland (android11: x86_64, run natively)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--allocs", type=int,
                        help="malloc_churn's allocations, shared among its threads (default: "
                             f"{QEMU_ALLOCS} under qemu-user, {NATIVE_ALLOCS} natively)")
    parser.add_argument("--intervals", default="4096,1")
    parser.add_argument("--stacks", default="8192",
                        help="malloc_churn's bytes of live stack above its allocations, each a "
                             "workload (e.g. 512,8192,32768,131072)")
    parser.add_argument("--frame-pointers", action="store_true",
                        help="malloc_churn built with frame pointers too (malloc_churn_fp)")
    parser.add_argument("--workloads", default="",
                        help="only these, e.g. 'malloc_churn 1t 8K,alloc_sites 4t'")
    parser.add_argument("--keep", type=pathlib.Path,
                        help="keep each run's outputs and session log in this directory")
    args = parser.parse_args()
    release = RELEASES[args.android]
    if args.allocs is None:
        args.allocs = NATIVE_ALLOCS if release.native else QEMU_ALLOCS
    intervals = [int(i) for i in args.intervals.split(",")]
    stacks = [int(size) for size in args.stacks.split(",")]
    churns = ["malloc_churn", *([FRAMED_CHURN] if args.frame_pointers else [])]
    chosen = [w for w in workloads(args.allocs, stacks, churns)
              if not args.workloads or w.label in args.workloads.split(",")]
    with tempfile.TemporaryDirectory(prefix="droidheap-versus-") as tmp:
        work = args.keep or pathlib.Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        binaries = build_programs(work, release.abi)
        try:
            device = Device(release)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            print(f"versus_heapprofd: the Android test device did not start: "
                  f"{str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
            return 1
        try:
            for program in binaries.values():
                device.push(program, f"{DEVICE_DIR}/{program.name}")
            bench = Bench(device, work, binaries)
            results = [(w, i, measure(bench, w, i, args.runs)) for w in chosen
                       for i in intervals]
        except (RuntimeError, subprocess.SubprocessError) as e:
            print(f"versus_heapprofd: {e}", file=sys.stderr)
            return 1
        finally:
            device.close()
    how = "natively" if release.native else "under qemu-user"
    print(f"droidheap root mode (dh) against Android {release.version}'s heapprofd (hp), Android "
          f"test device ({release.abi}, {how}), medians of {args.runs} runs; malloc_churn's "
          f"{args.allocs} allocations, -x")
    print("\n".join(format_table(results)))
    if bench.restarts:
        print("sessions that ended before the program started, started again:")
        print("\n".join(f"  {restart}" for restart in bench.restarts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
