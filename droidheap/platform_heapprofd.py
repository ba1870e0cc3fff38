"""Profiling through the platform's own heapprofd (issue 7, mode 3): no root, an app that is
profileable or debuggable (any process on a userdebug or eng build), Android 10 or later.

Android's `perfetto` command starts a tracing session whose `android.heapprofd` data source makes
the platform's heapprofd profile the targets. The trace it writes is heapprofd's format, which
droidheap reads anyway: the caller converts the pulled trace with droidheap.convert.convert_trace
and gets the same outputs as from droidheapd.

API (the CLI's `--mode platform` calls these; nothing here prints):

    check_profileable(device, package) -> Eligibility
        Whether the platform's heapprofd may profile the app `package` (or one of its processes,
        "package:suffix"), from the SDK level, the build type, `dumpsys package` and, on Android
        12+, `simpleperf_app_runner --show-app-type`. Raises DroidheapError (one line: why not and
        what would work) when it may not; returns `verified=False` where the device cannot tell
        (a non-debuggable app on Android 10-11).
    build_trace_config(options, names, pids, duration_ms) -> bytes
        The serialized perfetto TraceConfig for droidheap's flags (-i -c --no-block-client
        --shmem-size --heaps --all-heaps, -n/-p, -d; duration 0 = until stopped).
    run_platform_session(device, options, names, pids, duration_ms, out_dir,
                         stop_requested=None, note=None) -> pathlib.Path
        Starts perfetto on the device, waits for -d, `stop_requested()`, Ctrl-C or SIGTERM (as
        KeyboardInterrupt), stops perfetto so heapprofd writes its final dumps, pulls the trace to
        out_dir/raw-trace, removes it from the device and returns the local path. `note` receives
        warnings that do not end the session ("warning: ...").
    LACKS
        What this mode lacks compared with droidheap's own daemon, one line each.

The device commands, in order: `printf '<config>' | perfetto --background -c - -o TRACE` (it
prints the pid of the detached perfetto), `cat /proc/PID/stat` until it exits or the session is
to stop, `kill -TERM PID` and `cat /proc/PID/stat` until it has exited (perfetto flushes and
writes the trace on SIGTERM, as on Ctrl-C), then the pull and `rm -f TRACE`.
"""
import dataclasses
import pathlib
import re
import shlex
import time
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from droidheap.device.adb_journal import PLATFORM_TRACE_DIR, PLATFORM_TRACES, PROFILER_DIR
from droidheap.device.adb_shell import LISTING_MAX_BYTES
from droidheap.errors import DroidheapError
from droidheap.session import ProfileOptions
from droidheap.session_runs import cpu_ticks, malloc_only_reason
from droidheap.stop_signals import sleep
from droidheap.trace.heap_dumps import HEAPPROFD_DATA_SOURCE
from droidheap.trace.reader import parse_trace

if TYPE_CHECKING:
    from droidheap.device.adb import AdbDevice

MIN_SDK = 29  # Android 10: the first with heapprofd
LACKS = (
    "dumps on demand: droidheapd dumps on `kill -USR1`; the platform's heapprofd dumps only every "
    "-c milliseconds and when the session ends (use -c instead)",
    "`-- CMD` on a user build: there the platform profiles apps only, never a program started "
    "from the shell or a native service",
    "droidheap's unwinder: heapprofd unwinds with the platform's libunwindstack, so droidheap's "
    "unwinding and its [droidheap: ...] error frames do not apply",
    "ending with the targets: the session runs until -d or Ctrl-C even when every target has "
    "exited",
    "--seed: the platform's sampler cannot be seeded",
    "the daemon's log: perfetto runs detached and says nothing until the trace is pulled, so a "
    "target that was never profiled shows only then",
    "on Android 10 and 11: no 32-bit app on a 64-bit device, no heap but libc.malloc (--heaps and "
    "--all-heaps are 12+), and only the debuggable flag can be checked beforehand, not the "
    "profileable one; on 10, no --dump-at-max (its dumps are totals), and a client blocked on a "
    "full buffer waits with no time limit",
)

# As Perfetto's own tools/heap_profile: 62 MiB, drained into the file every file_write_period_ms.
# A ring, as Perfetto's trace processor asks: it flags write_into_file with a DISCARD buffer as
# data loss (such a buffer can stop taking data once filled). No flush_period_ms, though the
# trace processor asks for one: heapprofd dumps every process on each flush, which would add dumps
# -c did not ask for (seen on Android 10: one per flush_period_ms).
_BUFFER_KB = 63488
_FLUSH_TIMEOUT_MS = 30000  # a final dump of a large heap takes a while to flush
_UINT32_MAX = 2**32 - 1
_START_TIMEOUT_S = 30.0
_POLL_S = 0.5
_STOP_TIMEOUT_S = _FLUSH_TIMEOUT_MS / 1000 + 30
_PACKAGE_HEADER = re.compile(r"^(\s*)Package \[([^\]]+)\] \([0-9a-f]+\):\s*$")
_FLAGS_LINE = re.compile(r"^\s*(?:flags|pkgFlags)=\[(.*)\]\s*$")


@dataclasses.dataclass(frozen=True)
class Eligibility:
    reason: str     # why the platform's heapprofd may profile it ("debuggable", ...)
    verified: bool  # False: the device cannot tell, and an ineligible app gives an empty profile


# ---- the trace config ----------------------------------------------------------------------

def build_trace_config(options: ProfileOptions, names: Sequence[str], pids: Sequence[int],
                       duration_ms: int, running: bool = True, startup: bool = True,
                       every_process: bool = False) -> bytes:
    """One buffer, the android.heapprofd data source configured from droidheap's flags, and
    linux.process_stats so that the dumps' processes have names (droidheapd writes them too)."""
    if not names and not pids and not every_process:
        raise DroidheapError("the platform's heapprofd needs targets: -n NAME, -p PID or --all")
    # 0 is not "every allocation" but a crash of the target before Android 12.
    if not 1 <= options.sampling_interval <= 2**63:
        raise DroidheapError("the sampling interval (-i) must be at least 1 byte")
    shmem = options.shmem_size
    if shmem < 8192 or shmem % 4096 or shmem & (shmem - 1):
        raise DroidheapError("--shmem-size must be a power of two of at least 8192")
    for what, value in (("-d", duration_ms), ("-c", options.dump_interval_ms)):
        if not 0 <= value <= _UINT32_MAX:
            raise DroidheapError(f"{what} must be between 0 and {_UINT32_MAX} milliseconds")

    config = pb.TraceConfig(duration_ms=duration_ms, write_into_file=True,
                            flush_timeout_ms=_FLUSH_TIMEOUT_MS)
    config.buffers.add(size_kb=_BUFFER_KB, fill_policy=pb.TraceConfig.BufferConfig.RING_BUFFER)
    source = config.data_sources.add().config
    source.name = HEAPPROFD_DATA_SOURCE
    source.target_buffer = 0
    heap = source.heapprofd_config
    heap.sampling_interval_bytes = options.sampling_interval
    heap.process_cmdline.extend(names)
    heap.pid.extend(pids)
    if every_process:
        heap.all = True  # every process the platform lets it profile
    heap.shmem_size_bytes = shmem
    heap.block_client = options.block_client
    if options.block_client:
        heap.block_client_timeout_us = options.block_client_timeout_us  # Android 11+
    # Android 11+, as heap_profile's --no-running and --no-startup.
    if not running:
        heap.no_running = True
    if not startup:
        heap.no_startup = True
    if options.dump_at_max:
        heap.dump_at_max = True  # Android 11+
    if not options.fork_teardown:
        heap.disable_fork_teardown = True  # Android 11+
    if options.dump_interval_ms:
        # droidheapd's first periodic dump also comes one interval after the start.
        heap.continuous_dump_config.dump_phase_ms = options.dump_interval_ms
        heap.continuous_dump_config.dump_interval_ms = options.dump_interval_ms
    # Neither: malloc only, as droidheapd. Both fields came with custom heaps in Android 12;
    # 10 and 11 ignore them and record malloc only.
    if options.heaps:
        heap.heaps.extend(options.heaps)
    if options.all_heaps:
        heap.all_heaps = True
    # The guardrails, as the platform has them (the memory cap: Android 12+).
    if options.max_daemon_memory:
        heap.max_heapprofd_memory_kb = max(1, options.max_daemon_memory // 1024)
    if options.max_trace_size:
        config.max_file_size_bytes = options.max_trace_size
    processes = config.data_sources.add().config
    processes.name = "linux.process_stats"
    processes.target_buffer = 0
    processes.process_stats_config.scan_all_processes_on_start = True
    return config.SerializeToString()


# ---- may the platform profile it? ------------------------------------------------------------

def package_flags(dumpsys_output: str, package: str) -> Optional[frozenset]:
    """The ApplicationInfo flags `dumpsys package` prints for `package` (the `flags=[...]` and
    `pkgFlags=[...]` lines of its first "Package [NAME] (hash):" block); None when no such block.
    No Android release prints PROFILEABLE_BY_SHELL there: its private-flag list leaves it out."""
    lines = dumpsys_output.splitlines()
    for i, line in enumerate(lines):
        header = _PACKAGE_HEADER.match(line)
        if not header or header.group(2) != package:
            continue
        indent = len(header.group(1))
        flags = set()
        for body in lines[i + 1:]:
            if body.strip() and len(body) - len(body.lstrip()) <= indent:
                break
            match = _FLAGS_LINE.match(body)
            if match:
                flags.update(match.group(1).split())
        return frozenset(flags)
    return None


def check_profileable(device: "AdbDevice", package: str) -> Eligibility:
    """Raises DroidheapError, in one line, when the platform's heapprofd will not profile the app
    `package` on `device`; says why it may otherwise (see Eligibility.verified)."""
    facts = device.facts
    package = package.split(":", 1)[0]
    if facts.sdk < MIN_SDK:
        raise DroidheapError(f"the platform's heapprofd needs Android 10 (SDK {MIN_SDK}); "
                             f"{device.describe()} has SDK {facts.sdk}: root would work "
                             "(droidheap's own daemon)")
    if facts.build_type != "user":
        return Eligibility(f"a {facts.build_type} build lets heapprofd profile any app", True)

    dump = device.run(["dumpsys", "package", package], max_output=LISTING_MAX_BYTES)
    if dump.exit_code != 0:
        raise DroidheapError(f"dumpsys package failed on {device.serial}: "
                             f"{_first_line(dump.stderr or dump.stdout)}")
    flags = package_flags(dump.stdout, package)
    if flags is None:
        raise DroidheapError(f"{package} is not an installed app on {device.describe()}: on a "
                             "user build the platform's heapprofd profiles only apps that are "
                             "profileable or debuggable (root or a userdebug build profile "
                             "anything)")
    if "DEBUGGABLE" in flags:
        return Eligibility("debuggable", True)
    if facts.sdk < 31:
        return Eligibility("not debuggable; Android 10 and 11 do not show whether it is "
                           "profileable, and heapprofd records nothing if it is not", False)
    # The platform's own check for profiling from the shell, the one simpleperf uses on 12+.
    app_type = device.run(["simpleperf_app_runner", package, "--show-app-type"])
    verdict = app_type.stdout.strip() if app_type.exit_code == 0 else ""
    if verdict == "non_profileable":
        raise DroidheapError(
            f"{package} is neither profileable nor debuggable, and {device.describe()} is a "
            "user build, so the platform's heapprofd will not profile it: root (droidheap's own "
            "daemon), a userdebug build, a debuggable build of the app or "
            '<profileable android:shell="true"/> in its manifest would')
    if verdict in ("profileable", "debuggable"):
        return Eligibility(verdict, True)
    return Eligibility("not debuggable; whether it is profileable could not be read "
                       f"({_first_line(app_type.stderr or app_type.stdout)})", False)


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "no output"


# ---- the session ---------------------------------------------------------------------------

class ProcessNamer:
    """The `stop_requested` of a session whose targets are named (-n): twice a second at most,
    notes the command line of each running process of those names, so that the outputs name
    them where the trace does not (Android 10's linux.process_stats names only the processes
    running as the session starts, and heapprofd's dumps carry no name). Never asks to stop, nor
    ends the session when a poll fails (a device too busy to answer in time): that poll's names
    are all it costs, said once through `note`; a device that is gone ends the session by
    PlatformSession's own polls. Called by the session's thread only."""

    def __init__(self, device: "AdbDevice", names: Sequence[str],
                 note: Optional[Callable[[str], None]] = None):
        self.device = device
        self.argvs: Dict[int, List[str]] = {}
        self._note = note or (lambda message: None)
        self._failed = False
        # One record per process: "@PID", then its arguments, one per line.
        self._script = (f"for p in $(pidof {' '.join(shlex.quote(n) for n in names)}); do "
                        "echo @$p; tr '\\0' '\\n' < /proc/$p/cmdline; echo; done")
        self._next_poll = 0.0

    def __call__(self) -> bool:
        now = time.monotonic()
        if now >= self._next_poll:
            self._next_poll = now + _POLL_S
            pid = None
            try:
                listing = self.device.run_script(self._script, max_output=LISTING_MAX_BYTES)
            except DroidheapError as e:
                if not self._failed:
                    self._failed = True
                    self._note(f"warning: {e}; the outputs may not name every process of "
                               "the session by its command line")
                return False
            for line in listing.stdout.splitlines():
                if line.startswith("@") and line[1:].isdigit():
                    pid = int(line[1:])
                    self.argvs[pid] = []  # this poll's, for a pid that exec'd or was reused
                elif pid is not None and line:
                    self.argvs[pid].append(line)
        return False


class ProgramStarter:
    """The `stop_requested` of a session that starts its target (`-- CMD`; not on a user build,
    where the platform profiles apps only): once heapprofd has set heapprofd.enable.<name>, which
    bionic reads as a program starts, it starts the program; it is true once the program has
    exited. Called by the session's thread only; asks the device twice a second at most."""

    def __init__(self, device: "AdbDevice", argv: Sequence[str], name: str):
        self.device = device
        self.argv = list(argv)
        self.name = name
        self.program = None  # the AdbProgram, once started
        self._deadline = time.monotonic() + _START_TIMEOUT_S
        self._next_poll = 0.0

    def __call__(self) -> bool:
        if self.program is not None:
            return self.program.poll() is not None
        now = time.monotonic()
        if now < self._next_poll:
            return False
        self._next_poll = now + _POLL_S
        if self.device.getprop(f"heapprofd.enable.{self.name}"):
            self.program = self.device.spawn(self.argv)
        elif now > self._deadline:
            raise DroidheapError(f"the platform's heapprofd did not enable profiling of "
                                 f"{self.name} within {_START_TIMEOUT_S:.0f} s (`adb logcat -s "
                                 "heapprofd` says why)")
        return False


class PlatformSession:
    """One perfetto session on one device. Created and used by the thread that runs the profile
    (run_platform_session); not thread-safe. Owns the device's trace file until pull() removes
    it."""

    def __init__(self, device: "AdbDevice", note: Optional[Callable[[str], None]] = None):
        self.device = device
        self._note = note or (lambda message: None)
        # Android 10 keeps the shell from deleting traces (as tools/heap_profile found): one name,
        # overwritten by each session, instead of one left behind per session.
        name = (f"droidheap-{time.time_ns()}.trace" if device.facts.sdk >= 30
                else "droidheap-platform.trace")
        self.trace_path = f"{PLATFORM_TRACE_DIR}/{name}"
        self.pid: Optional[int] = None
        self.profiled_pids: set = set()  # those with a dump in the pulled trace

    def start(self, config: bytes) -> None:
        """Runs perfetto detached with `config` on its stdin: the one way Android 12+ lets it
        read a config the shell wrote (SELinux keeps it out of /data/local/tmp), and it works on
        10 and 11 too. The config travels as printf's octal escapes, as adbutils' shell has no
        stdin."""
        octal = "".join(f"\\{byte:03o}" for byte in config)
        # Named for `droidheap pull`, should this session die before its own (AdbDevice.remove
        # takes the name back).
        self.device.run_script(f"mkdir -p {PROFILER_DIR} && echo "
                               f"{shlex.quote(self.trace_path)} >> {PLATFORM_TRACES}")
        result = self.device.run_script(
            f"printf '{octal}' | perfetto --background -c - -o {shlex.quote(self.trace_path)}",
            _START_TIMEOUT_S)
        if result.exit_code != 0:
            raise DroidheapError(f"perfetto did not start on {self.device.serial}: "
                                 f"{_first_line(result.stderr or result.stdout)}")
        words = result.stdout.split()
        if not words or not words[-1].isdigit() or int(words[-1]) <= 0:
            raise DroidheapError(f"perfetto on {self.device.serial} printed no pid "
                                 f"({_first_line(result.stdout)})")
        self.pid = int(words[-1])

    def running(self) -> bool:
        """Whether our perfetto still runs: a zombie has exited, and another program under a
        reused pid is not ours."""
        if self.pid is None:
            return False
        stat = self.device.run(["cat", f"/proc/{self.pid}/stat"])
        if stat.exit_code != 0:
            return False
        text = stat.stdout
        comm, state = text[text.find("(") + 1:text.rfind(")")], text[text.rfind(")") + 2:][:1]
        return (comm == "perfetto" or comm.startswith("p-")) and state not in ("Z", "X", "")

    def wait(self, duration_ms: int, stop_requested: Optional[Callable[[], bool]]) -> None:
        """Returns when perfetto has ended by itself (-d is in its config), when the session
        should stop (`stop_requested()`, Ctrl-C, or SIGTERM raised as KeyboardInterrupt), or
        well after -d when perfetto has not ended then."""
        deadline = (time.monotonic() + duration_ms / 1000 + _STOP_TIMEOUT_S
                    if duration_ms else None)
        next_poll = 0.0
        try:
            while not (stop_requested and stop_requested()):
                now = time.monotonic()
                if deadline is not None and now > deadline:
                    self._note(f"warning: perfetto had not ended {_STOP_TIMEOUT_S:.0f} s "
                               "after -d; stopping it")
                    return
                if now >= next_poll:
                    if not self.running():
                        return
                    next_poll = now + _POLL_S
                sleep(0.05)
        except KeyboardInterrupt:
            return

    def stop(self) -> None:
        """SIGTERM, as Ctrl-C: perfetto flushes (heapprofd writes its final dumps), writes the
        trace and exits; waits for that."""
        if not self.running():
            return
        self.device.run(["kill", "-TERM", str(self.pid)])
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        while self.running():
            if time.monotonic() > deadline:
                self.device.run(["kill", "-KILL", str(self.pid)])
                self._note(f"warning: perfetto did not stop within {_STOP_TIMEOUT_S:.0f} s and "
                           "was killed; the trace holds what it had written")
                return
            time.sleep(_POLL_S)

    def abort(self) -> None:
        """Best effort, on the way out of a failure: no perfetto left running on the device."""
        try:
            if self.running():
                self.device.run(["kill", "-TERM", str(self.pid)])
        except DroidheapError:
            pass

    def pull(self, out_dir: pathlib.Path, targets: str) -> pathlib.Path:
        raw = pathlib.Path(out_dir) / "raw-trace"
        try:
            raw.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:
            raise DroidheapError(f"cannot create {raw.parent}: {e.strerror or e}") from None
        self.device.pull(self.trace_path, raw)
        try:
            self.device.remove(self.trace_path)
        except DroidheapError as e:
            self._note(f"warning: {e}")
        data = raw.read_bytes()
        if not data:
            raise DroidheapError("perfetto wrote an empty trace: is the tracing service "
                                 "running? (adb shell setprop persist.traced.enable 1)")
        profiles = [p.profile_packet for p in parse_trace(data).packets
                    if p.HasField("profile_packet")]
        self.profiled_pids = {dump.pid for profile in profiles for dump in profile.process_dumps}
        if not profiles:
            raise DroidheapError(f"the platform's heapprofd recorded no heap dump of {targets} "
                                 "(not running, not profileable, or 32-bit on Android 10-11? "
                                 f"`adb logcat -s heapprofd` says); {raw} holds perfetto's trace")
        return raw


def run_platform_session(device: "AdbDevice", options: ProfileOptions, names: Sequence[str],
                         pids: Sequence[int], duration_ms: int, out_dir: pathlib.Path,
                         stop_requested: Optional[Callable[[], bool]] = None,
                         note: Optional[Callable[[str], None]] = None, running: bool = True,
                         startup: bool = True, every_process: bool = False) -> pathlib.Path:
    """See the module docstring. Raises DroidheapError, in one line, for every device failure."""
    config = build_trace_config(options, names, pids, duration_ms, running, startup,
                                every_process)
    session = PlatformSession(device, note)
    # The running processes asked for, and what each has run: one that runs on and is never
    # profiled is one bionic's hook cannot reach (session_runs.malloc_only_reason), as in root
    # mode; an app's own reasons are said apart (check_profileable).
    watched = [] if every_process or not running else \
        sorted({*pids, *(pid for name in names for pid in device.pidof(name))})
    ticks = cpu_ticks(device, [pid for pid in watched if not device.app_name(pid)])
    session.start(config)
    try:
        session.wait(duration_ms, stop_requested)
        session.stop()
    except BaseException:
        session.abort()
        raise
    targets = ", ".join([*names, *(f"pid {pid}" for pid in pids)]) or "any process"
    try:
        raw = session.pull(out_dir, targets)
    finally:
        for pid in sorted(set(ticks) - session.profiled_pids):
            reason = malloc_only_reason(device, pid, ticks)
            if reason and note:
                note(f"warning: pid {pid} was not profiled: {reason}")
    return raw
