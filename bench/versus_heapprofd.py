"""droidheap's root mode against Google's own heapprofd (Android 10's), on the Android test device
(Android 10's arm64 userland under qemu-user, scripts/test_adbd): what each costs the profiled
program, how exact its per-site bytes are, what it loses, and what its daemon takes.

    .venv/bin/python bench/versus_heapprofd.py [--runs 3] [--allocs 40000] [--intervals 4096,1]
                                               [--workloads 'alloc_sites 4t,...'] [--keep DIR]

The same Android builds for both (tests/android.py, linked --no-rosegment: Android 10's heapprofd
cannot unwind lld's API-29 layout), started the same way: each profiler's session is opened for
the program's name (`droidheap -n`, `droidheap --mode platform -n`), and once the device's
heapprofd.enable.<name> property says so the program is started by `adb shell`, then the session
is ended (SIGINT) after it exits. The workloads: bench/programs/malloc_churn.c, 1 and 4 threads
(ALLOCS allocations shared among them, half freed by another thread), timing itself; and
tests/programs/alloc_sites.c, --threads 1 and 4, whose exact bytes per site are in
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
               as the session starts (/proc/<pid>/clear_refs). Both daemons run under qemu-user,
               whose own memory counts in both.
"""
import argparse
import dataclasses
import os
import pathlib
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb  # noqa: E402

from droidheap import native  # noqa: E402
from overhead import daemon_usage  # noqa: E402
from tests.e2e.expected_sites import Site, sampling_bound, sites  # noqa: E402
from tests.e2e.trace_check import totals_by_leaf_function  # noqa: E402
from tests.trace_processor import SiteTotals  # noqa: E402

ABI = "arm64-v8a"
DEVICE_DIR = "/data/local/tmp"
DROIDHEAP, HEAPPROFD = "droidheap", "heapprofd"
PROFILERS = (DROIDHEAP, HEAPPROFD)
CHURN_SOURCE = ROOT / "bench" / "programs" / "malloc_churn.c"
SITES_SOURCE = ROOT / "tests" / "programs" / "alloc_sites.c"
LINGER_FREEING_MS = 200
# Allocations on threads that start after heapprofd's client connected: under qemu the client
# passes heapprofd qemu's copy of /proc/self/maps, frozen before their stacks existed, so it
# cannot unwind them ("ERROR 1").
THREAD_SITES = {"site_thread_calloc"}
CLOCK_TICKS_PER_S = 100  # /proc/<pid>/stat's unit on Linux
SESSION_TIMEOUT_S = 120
# Now and then (a loaded machine) perfetto's session writes an empty trace before heapprofd is
# enabled; a session that ends before the program could start is started again.
SESSION_ATTEMPTS = 3
PROGRAM_TIMEOUT_S = 300


@dataclasses.dataclass(frozen=True)
class Workload:
    program: str  # the device file's basename, and the session's process name
    threads: int
    args: Tuple[str, ...]
    exact: Optional[Dict[str, Site]]  # alloc_sites' bytes per site

    @property
    def label(self) -> str:
        return f"{self.program} {self.threads}t"


def workloads(allocs: int) -> List[Workload]:
    """`allocs`: malloc_churn's allocations in all, shared among its threads (1 thread alone
    would be over too soon to time)."""
    churn = [Workload("malloc_churn", t, ("-t", str(t), "-n", str(allocs // t), "-x"), None)
             for t in (1, 4)]
    return churn + [Workload("alloc_sites", t, ("--threads", str(t), "--linger-freeing",
                                                str(LINGER_FREEING_MS)), sites(t))
                    for t in (1, 4)]


# ---- the pure parts: what the device and the outputs say --------------------------------------

def parse_program_output(output: str) -> Tuple[int, Optional[int]]:
    """(elapsed ns, allocations or None) of one run whose every output line was prefixed with the
    device's clock (`date +%s%N`) and followed by `start_ns=N`: malloc_churn's own elapsed_ns
    (and allocations=N), else the time from the start to the program's "done" line."""
    churn = re.search(r"elapsed_ns=(\d+) allocations=(\d+)", output)
    if churn:
        return int(churn.group(1)), int(churn.group(2))
    done = re.search(r"^(\d+) done$", output, re.MULTILINE)
    start = re.search(r"^start_ns=(\d+)$", output, re.MULTILINE)
    if done is None or start is None:
        raise RuntimeError(f"the program printed neither elapsed_ns nor done:\n{output[-2000:]}")
    return int(done.group(1)) - int(start.group(1)), None


def parse_cpu_ticks(stat: str) -> int:
    """utime + stime of a /proc/<pid>/stat line (fields 14 and 15; the name may hold spaces)."""
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def parse_vmhwm_kib(status: str) -> int:
    found = re.search(r"^VmHWM:\s*(\d+) kB", status, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no VmHWM in {status[:200]!r}")
    return int(found.group(1))


# A dump's flags that say samples were lost (both daemons set them), and how to say it.
LOSS_FLAGS = {"buffer_overran": "buffer overran", "buffer_corrupted": "buffer corrupted",
              "hit_guardrail": "guardrail hit", "rejected_concurrent": "rejected"}


@dataclasses.dataclass
class TraceSummary:
    """The profiled program's dumps in a trace (the process that booked most samples)."""
    pid: Optional[int]  # None: no dump of any process
    heap_samples: int = 0  # as of its last dump with stats
    unwinding_errors: int = 0
    flags: Tuple[str, ...] = ()  # LOSS_FLAGS' words, raised on any of its dumps


def summarize_trace(data: bytes) -> TraceSummary:
    """Reads droidheapd's and Android 10's heapprofd traces alike: each process's dumps (a dump
    may come in several packets; the last one with stats counts)."""
    stats: Dict[int, pb.ProfilePacket.ProcessStats] = {}
    flags: Dict[int, set] = {}
    for packet in pb.Trace.FromString(data).packet:
        for process in packet.profile_packet.process_dumps:
            if process.HasField("stats") or process.pid not in stats:
                stats[process.pid] = process.stats
            flags.setdefault(process.pid, set()).update(
                text for flag, text in LOSS_FLAGS.items() if getattr(process, flag))
    if not stats:
        return TraceSummary(None)
    pid = max(stats, key=lambda p: stats[p].heap_samples)
    return TraceSummary(pid, stats[pid].heap_samples, stats[pid].unwinding_errors,
                        tuple(sorted(flags[pid])))


@dataclasses.dataclass
class SiteAccuracy:
    errors: Dict[str, float]  # booked site: (booked - exact) / exact allocated bytes
    missing: List[str]  # sites with no bytes booked
    unattributed: int  # bytes on stacks through no site function
    beyond_sampling: List[str]  # booked sites off by more than sampling explains (5 sigma)


def site_accuracy(booked: Dict[str, SiteTotals], exact: Dict[str, Site],
                  interval: int) -> SiteAccuracy:
    errors, missing, beyond = {}, [], []
    for name, site in exact.items():
        totals = booked.get(name)
        if totals is None or totals.allocated == 0:
            missing.append(name)
            continue
        errors[name] = (totals.allocated - site.allocated) / site.allocated
        if abs(totals.allocated - site.allocated) > sampling_bound(site, interval):
            beyond.append(name)
    unattributed = sum(t.allocated for name, t in booked.items() if name not in exact)
    return SiteAccuracy(errors, missing, unattributed, beyond)


# ---- runs ------------------------------------------------------------------------------------

@dataclasses.dataclass
class Run:
    elapsed_ns: int
    allocations: Optional[int] = None
    trace: Optional[TraceSummary] = None
    accuracy: Optional[SiteAccuracy] = None
    daemon_cpu_s: Optional[float] = None
    daemon_rss_kib: Optional[int] = None

    def losses(self, interval: int) -> List[str]:
        if self.trace is None:
            return []
        if self.trace.pid is None:
            return ["profile missing"]
        losses = list(self.trace.flags)
        if interval == 1 and self.allocations and self.trace.heap_samples < self.allocations:
            losses.append(f"{self.allocations - self.trace.heap_samples} of {self.allocations} "
                          f"allocations never sampled")
        return losses


class Device:
    """The Android test device on its own adb server, both started here and stopped by close()."""

    def __init__(self):
        from tests.adb.conftest import ADB_BINARIES, AdbServer, _free_port, start_test_adbd
        from tests.android import ROOTFS
        if not ROOTFS.is_file():
            raise RuntimeError(f"no {ROOTFS}: the Android test device cannot start")
        self.server = AdbServer(ADB_BINARIES["adb36"], _free_port(), native.installed_bin_dir())
        self.adbd = None
        try:
            self.server.adb("start-server")
            self.adbd = start_test_adbd(root=True, android=True)
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


Cell = Dict[str, List[Run]]  # {"unprofiled" | profiler: runs}
Results = List[Tuple[Workload, int, Cell]]


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


# ---- the table -------------------------------------------------------------------------------

def _median(values: Sequence[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


@dataclasses.dataclass
class Figures:
    """One profiler's medians for one workload, threads and interval."""
    multiple: float
    site_errors: Dict[str, float] = dataclasses.field(default_factory=dict)  # median |error|
    sites_booked: Optional[int] = None  # in the run that booked fewest
    missing: Tuple[str, ...] = ()
    beyond_sampling: Tuple[str, ...] = ()  # in any run
    lost_runs: int = 0
    losses: Tuple[str, ...] = ()
    unwinding_errors: Optional[Tuple[int, int]] = None  # (errors, samples), the worst run
    cpu_s: Optional[float] = None
    rss_mib: Optional[float] = None


def figures(cell: Cell, profiler: str, interval: int) -> Figures:
    base = statistics.median(r.elapsed_ns for r in cell["unprofiled"])
    runs = cell[profiler]
    accuracies = [r.accuracy for r in runs if r.accuracy is not None]
    losses = [loss for r in runs for loss in r.losses(interval)]
    booked = [len(a.errors) for a in accuracies]
    return Figures(
        multiple=statistics.median(r.elapsed_ns for r in runs) / base,
        site_errors={name: statistics.median(abs(a.errors[name]) for a in accuracies
                                             if name in a.errors)
                     for name in sorted({n for a in accuracies for n in a.errors})},
        sites_booked=min(booked) if booked else None,
        missing=tuple(sorted({m for a in accuracies for m in a.missing})),
        beyond_sampling=tuple(sorted({b for a in accuracies for b in a.beyond_sampling})),
        lost_runs=sum(1 for r in runs if r.losses(interval)),
        losses=tuple(losses),
        unwinding_errors=max(((r.trace.unwinding_errors, r.trace.heap_samples) for r in runs
                              if r.trace and r.trace.unwinding_errors), default=None),
        cpu_s=_median([r.daemon_cpu_s for r in runs]),
        rss_mib=_median([r.daemon_rss_kib / 1024 if r.daemon_rss_kib else None for r in runs]))


def goals(dh: Figures, hp: Figures) -> List[str]:
    """The goals this row misses, in words."""
    missed = []
    if dh.multiple > hp.multiple / 3:
        missed.append(f"overhead {dh.multiple:.2f}x is more than a third of heapprofd's "
                      f"{hp.multiple:.2f}x")
    if dh.sites_booked is not None and hp.sites_booked is not None:
        if dh.sites_booked < hp.sites_booked:
            missed.append(f"books {dh.sites_booked} sites, heapprofd {hp.sites_booked}")
        else:  # over the sites both booked: heapprofd's fewer sites may be its easier ones
            both = dh.site_errors.keys() & hp.site_errors.keys()
            dh_error = max((dh.site_errors[n] for n in both), default=0.0)
            hp_error = max((hp.site_errors[n] for n in both), default=0.0)
            if dh_error > hp_error:
                missed.append(f"max error {dh_error:.1%} above heapprofd's {hp_error:.1%} "
                              f"over the {len(both)} sites both booked")
    if dh.lost_runs and hp.lost_runs:
        missed.append(f"lost in {dh.lost_runs} runs where heapprofd lost too")
    elif dh.lost_runs:
        missed.append(f"lost in {dh.lost_runs} runs (heapprofd in none)")
    if dh.rss_mib is not None and hp.rss_mib is not None and dh.rss_mib > hp.rss_mib:
        missed.append(f"daemon peak RSS {dh.rss_mib:.1f} MiB above heapprofd's "
                      f"{hp.rss_mib:.1f} MiB")
    return missed


def _cell(value, spec: str, width: int) -> str:
    return f"{'-' if value is None else format(value, spec):>{width}}"


def _error(f: Figures) -> str:
    if not f.site_errors:
        return f"{'-':>7}"
    return f"{max(f.site_errors.values()) * 100:>5.1f}/{f.sites_booked}"


def format_table(results: Results) -> List[str]:
    """The table, then a line per row with a goal missed, then the notes."""
    lines = [f"{'':>16} {'':>5} {'time x':>15} {'max err %/sites':>15} {'lost runs':>9} "
             f"{'cpu s':>13} {'RSS MiB':>13}  goals",
             f"{'workload':>16} {'-i':>5} " + " ".join(
                 f"{'dh':>{w}} {'hp':>{w}}" for w in (7, 7, 4, 6, 6)) + "  (dh vs hp)"]
    missed_lines, notes = [], []
    for workload, interval, cell in results:
        dh, hp = figures(cell, DROIDHEAP, interval), figures(cell, HEAPPROFD, interval)
        missed = goals(dh, hp)
        lines.append(
            f"{workload.label:>16} {interval:>5} {dh.multiple:>6.2f}x {hp.multiple:>6.2f}x "
            f"{_error(dh):>7} {_error(hp):>7} {dh.lost_runs:>4} {hp.lost_runs:>4} "
            f"{_cell(dh.cpu_s, '.2f', 6)} {_cell(hp.cpu_s, '.2f', 6)} "
            f"{_cell(dh.rss_mib, '.1f', 6)} {_cell(hp.rss_mib, '.1f', 6)}  "
            f"{'met' if not missed else 'MISSED'}")
        row = f"{workload.label}, -i {interval}"
        missed_lines += [f"  {row}: {m}" for m in missed]
        for name, f in ((DROIDHEAP, dh), (HEAPPROFD, hp)):
            for site in f.missing:
                why = ("unwound: no (qemu)" if name == HEAPPROFD and site in THREAD_SITES
                       else "not booked")
                notes.append(f"  {row}, {name}: {site} {why}")
            if f.site_errors:
                beyond = ", ".join(f.beyond_sampling) or "none"
                notes.append(f"  {row}, {name}: sites off by more than sampling explains "
                             f"(5 sigma): {beyond}")
            if f.losses:
                notes.append(f"  {row}, {name} lost: {'; '.join(sorted(set(f.losses)))}")
            if f.unwinding_errors:
                errors, samples = f.unwinding_errors
                notes.append(f"  {row}, {name}: unwinding errors in {errors} of {samples} "
                             f"samples (the run with most)")
    lines.append("")
    lines.append("goals (droidheap beside heapprofd, each row): overhead multiple at most a third "
                 "of heapprofd's; at least as many sites booked and a max site error no larger; "
                 "nothing lost; daemon peak RSS no larger")
    lines += (["goals missed:"] + missed_lines) if missed_lines else ["goals missed: none"]
    if notes:
        lines += ["notes:"] + notes
    return lines


# ---- main ------------------------------------------------------------------------------------

def build_programs(work: pathlib.Path) -> Dict[str, pathlib.Path]:
    """The Android builds both profilers run, linked --no-rosegment (see the module's doc)."""
    from tests.android import compile_android_program
    built = {}
    for source in (CHURN_SOURCE, SITES_SOURCE):
        built[source.stem] = compile_android_program(
            source, work / source.stem, ABI, rosegment=False,
            include_dirs=[ROOT / "ndk_client" / "include"])
    return built


def _terminate(signum, frame):
    raise SystemExit(f"versus_heapprofd: stopped by signal {signum}")


def main() -> int:
    # So that a kill (or a timeout) still stops the device and the adb server, in `finally`.
    signal.signal(signal.SIGTERM, _terminate)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--allocs", type=int, default=40000,
                        help="malloc_churn's allocations, shared among its threads")
    parser.add_argument("--intervals", default="4096,1")
    parser.add_argument("--workloads", default="",
                        help="only these, e.g. 'malloc_churn 1t,alloc_sites 4t'")
    parser.add_argument("--keep", type=pathlib.Path,
                        help="keep each run's outputs and session log in this directory")
    args = parser.parse_args()
    intervals = [int(i) for i in args.intervals.split(",")]
    chosen = [w for w in workloads(args.allocs)
              if not args.workloads or w.label in args.workloads.split(",")]
    with tempfile.TemporaryDirectory(prefix="droidheap-versus-") as tmp:
        work = args.keep or pathlib.Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        binaries = build_programs(work)
        try:
            device = Device()
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
    print(f"droidheap root mode (dh) against Android 10's heapprofd (hp), Android test device "
          f"(qemu-user), medians of {args.runs} runs; malloc_churn's {args.allocs} "
          f"allocations, -x")
    print("\n".join(format_table(results)))
    if bench.restarts:
        print("sessions that ended before the program started, started again:")
        print("\n".join(f"  {restart}" for restart in bench.restarts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
