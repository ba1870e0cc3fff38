"""How a session is driven once droidheapd runs (session.py): a program started and waited for
(`-- CMD`), or running processes signalled and those that start watched (`-n`, `-p`, `--all`),
until the program exits, -d is over, Ctrl-C, or every profiled process is gone. What it has to
say goes to `note` (the command prints it)."""
import contextlib
import dataclasses
import signal
import time
from typing import List, Optional

from droidheap.device.names import is_pattern, matching_pids, program_name
from droidheap.errors import DroidheapError
from droidheap.program_allocator import why_never_connected
from droidheap.results.model import ProgramExit
from droidheap.stop_signals import StopSignals, sleep

_CONNECT_TIMEOUT_S = 5.0
_EXIT_DUMP_TIMEOUT_S = 10.0
# How often a program droidheap started is looked at: its end is seen this much later at most.
_PROGRAM_POLL_S = 0.05


@dataclasses.dataclass
class Targets:
    """What -n/-p/--all and --no-running/--no-startup ask for."""
    names: List[str]
    pids: List[int]
    every_process: bool
    running: bool
    startup: bool

    def exact_names(self) -> List[str]:
        return [name for name in self.names if not is_pattern(name)]

    def patterns(self) -> List[str]:
        return [name for name in self.names if is_pattern(name)]

    def startup_names(self) -> List[str]:
        """The names taken at a program's start: the exact ones (bionic looks a starting program
        up by a property named after its name; a pattern names no property)."""
        return self.exact_names() if self.startup else []

    def from_startup(self) -> bool:
        """Whether processes that start during the session are profiled."""
        return bool(self.startup_names()) or (self.startup and self.every_process)


def resolve_targets(device, targets, note):
    """The running processes to signal: the -p pids, and those named -n (or all, with --all)
    unless --no-running."""
    if targets.every_process:
        return device.profileable_pids() if targets.running else []
    resolved = []
    if targets.running:
        programs = device.program_names() if targets.patterns() else {}
        for pattern in targets.patterns():
            found = matching_pids(pattern, programs)
            if not found:
                raise DroidheapError(f"no running process on {device.describe()} has a name "
                                     f"{pattern} matches (a pattern takes running processes "
                                     "only)")
            resolved += found
        for name in targets.exact_names():
            try:
                found = device.pidof(name)
            except DroidheapError as e:  # named processes the device cannot reach
                if not targets.startup:
                    raise
                note(f"warning: {e}; profiling only those named {name} that start from now")
                found = []
            if not found and not targets.startup:
                raise DroidheapError(f"no process named {name} on {device.describe()}")
            resolved += found
    for pid in targets.pids:
        if pid <= 0 or not device.process_exists(pid):
            raise DroidheapError(f"no process with pid {pid} on {device.describe()}")
        resolved.append(pid)
    return sorted(set(resolved))


def run_spawned(device, session, argv, duration_ms, note, stops) -> ProgramExit:
    """Runs `argv` from its start under `session` to its end (or -d's), and says how it ended."""
    name = program_name(argv)
    # The program is held until droidheapd listens, and droidheapd takes its pid (and its
    # descendants) alone: the start property (root's heapprofd.enable.<name>) loads the client
    # into every process of that name that starts meanwhile (droidheap's own `sh -c` commands,
    # when the program is `sh`, or another user's), and droidheapd refuses those.
    process = device.spawn_held(argv, name)
    unprofiled = device.unprofiled_descendants(name)
    if unprofiled:
        note(unprofiled)
    try:
        session.start(spawned=[process.pid])
        device.enable_spawned_at_start(name)
        profiling = True
    except DroidheapError as e:
        # As ddprof's wrapper does: the program runs even when profiling cannot.
        note(f"warning: profiling cannot start ({e}); running {argv[0]} without it")
        profiling = False
    try:
        process.release()
        ended = wait_for_program(process, duration_ms if profiling else 0, stops)
        if ended is None:  # -d is over: the final dump now, and the program goes on unprofiled
            session.stop()
            note(f"stopped profiling after {duration_ms} ms; {argv[0]} goes on without it")
            ended = wait_for_program(process, 0, stops)
    finally:
        if profiling:
            device.disable_spawned_at_start(name)
    if ended.status != 0:
        note(f"{argv[0]} exited with status {ended.status}" +
             (f" (droidheap stopped it at {ended.stopped_at})" if ended.stopped_at else ""))
    session.program_exits[process.pid] = ended
    if not profiling:
        raise DroidheapError(f"{argv[0]} ran without profiling")
    if process.pid not in session.connected_pids():
        note(f"warning: {argv[0]} (pid {process.pid}) never connected to droidheapd "
             f"({why_never_connected(device, argv[0])})")
    else:
        session.wait_until(lambda: process.pid in session.exited_pids(), _EXIT_DUMP_TIMEOUT_S)
    session.stop()
    _say_which_descendants_did_not_connect(device, session, name, note)
    return ended


def _say_which_descendants_did_not_connect(device, session, name: str, note) -> None:
    listed, more = session.unconnected_descendants()
    if not listed:
        return
    shown = listed[:8]
    unnamed = len(listed) - len(shown) + more
    count = len(shown) + unnamed
    programs = ", ".join(f"pid {pid} ({_shortened(cmdline)})" for pid, cmdline in shown)
    note(f"warning: {count} program{'s' if count > 1 else ''} that {name} ran never connected "
         f"({device.why_descendants_did_not_connect(name)}): {programs}"
         + (f" and {unnamed} more" if unnamed else ""))


def _shortened(cmdline: str, width: int = 60) -> str:
    """A command line as a process list shows it: its program by name, its arguments cut."""
    program, _, arguments = cmdline.partition(" ")
    shown = " ".join(filter(None, (program.rsplit("/", 1)[-1], arguments)))
    return shown if len(shown) <= width else shown[:width - 3] + "..."


def wait_for_program(process, duration_ms, stops: StopSignals) -> Optional[ProgramExit]:
    """How the program ended, or None when it still runs after `duration_ms` (0: no limit). Ctrl-C
    or SIGTERM (`stops`) stops it with SIGTERM and waits on."""
    deadline = time.monotonic() + duration_ms / 1000 if duration_ms else None
    while True:
        code = process.poll()
        if code is not None:
            return ProgramExit(128 - code if code < 0 else code, stops.name)
        wait_s = _PROGRAM_POLL_S
        if deadline is not None:
            wait_s = min(wait_s, deadline - time.monotonic())
            if wait_s <= 0:
                return None
        try:
            stops.sleep(wait_s)
        except KeyboardInterrupt:
            # The terminal's Ctrl-C reached the program too; a SIGTERM to us is passed on.
            with contextlib.suppress(OSError):
                process.send_signal(signal.SIGTERM)


def run_attached(device, session, pids, targets, duration_ms, note) -> Optional[str]:
    """Profiles `pids` (signalled) and, from their start, the programs `targets` names (or all)
    until -d, Ctrl-C or, when no program is taken at its start, every profiled process's exit.
    Returns what went wrong when none of the processes named -n ran at all (a name mistyped), else
    None."""
    startup_names = targets.startup_names()
    every_process = targets.every_process and targets.startup  # else the pids found running
    session.start(pids=pids, names=startup_names, every_process=every_process,
                  exit_when_clients_gone=not targets.from_startup())
    # What each signalled process has run so far: one that runs on and never connects is one
    # bionic's hook cannot reach (see malloc_only_reason).
    ticks = {} if targets.every_process else cpu_ticks(device, pids)
    apps = {}
    try:
        # Only once droidheapd listens: a program starting before would find no one to talk to.
        for name in startup_names:
            device.enable_at_start(name)
        if every_process:
            device.enable_all_at_start()
        if targets.from_startup():
            note(f"profiling {'every process' if every_process else ', '.join(startup_names)} "
                  f"from the start of each new process too; Ctrl-C to stop")
        session.wait_until(lambda: set(pids) <= session.recording_pids(), _CONNECT_TIMEOUT_S)
        connected = session.recording_pids()
        # An app takes the profiling signal only when profileable: one that does not connect may
        # never do so, which the end of the session says.
        if not targets.every_process:  # --all: most processes idle, and not asked for by name
            apps = {pid: device.app_name(pid) for pid in pids if pid not in connected}
        for pid in pids:
            if pid in connected:
                note(f"attached to pid {pid}")
            elif not targets.every_process:
                # An app's may be bionic's refusal: the end of the session says.
                why = _NEXT_ALLOCATION if apps.get(pid) else not_connected_yet(device, pid, ticks)
                note(f"warning: pid {pid} {why}")
        idle = len(set(pids) - connected)
        if targets.every_process and idle:
            # Most of a phone's processes sit idle: one line for them all.
            note(f"{idle} of {len(pids)} running processes have not connected yet; each will "
                  f"at its next allocation")
        # Processes started meanwhile may have connected first (a signalled one can take
        # seconds, under qemu-user or on a busy phone).
        for pid in sorted(connected - set(pids)):
            note(f"profiling pid {pid} from its start")
        # A running process that connects later (at its next allocation) is said to be attached
        # when it does, as those that connected at once were.
        announced = set(connected)
        deadline = time.monotonic() + duration_ms / 1000 if duration_ms else None
        while session.running() and (deadline is None or time.monotonic() < deadline):
            for pid in sorted(session.recording_pids() - announced):
                note(f"attached to pid {pid}" if pid in pids else
                     f"profiling pid {pid} from its start")
                announced.add(pid)
            sleep(0.05)
    except KeyboardInterrupt:
        note("stopping")
    finally:
        for name in startup_names:
            device.disable_at_start(name)
        if every_process:
            device.disable_all_at_start()
    session.stop()
    apps = _say_who_was_not_profiled(device, session, pids, startup_names, apps, ticks, note)
    if targets.names and not pids and not apps and not session.connected_pids():
        return (f"no process named {' or '.join(targets.names)} ran during the session (-n takes "
                "a process's name: the basename of its argv[0], or an app's process name)")
    return None


def _say_who_was_not_profiled(device, session, pids, startup_names, apps, ticks, note):
    """Notes why each process asked for never connected, and returns {pid: app name} of the apps
    among them (`apps`: those known so far). An app is asked about at the end, whether or not its
    CPU time moved: idle or not, one that is not profileable never takes the signal."""
    connected = session.connected_pids()
    unconnected = [pid for pid in pids if pid not in connected]
    for name in startup_names:  # apps that started during the session and never connected
        try:
            unconnected += device.pidof(name)
        except DroidheapError:  # only processes elsewhere have the name (another local device)
            pass
    for pid in sorted(set(unconnected) - connected):
        if pid not in apps:
            apps[pid] = device.app_name(pid)
        if not apps[pid] and pid in ticks:
            reason = malloc_only_reason(device, pid, ticks)
            if reason:
                note(f"warning: pid {pid} was not profiled: {reason}")
    apps = {pid: name for pid, name in apps.items() if name and pid not in connected}
    for pid, name in sorted(apps.items()):
        note(f"warning: pid {pid} ({name}) was not profiled: it is an app, and bionic takes the "
             "profiling signal in an app only when the app is profileable "
             '(<profileable android:shell="true"/> in its manifest, or a debuggable build of it, '
             "or a userdebug phone)")
    return apps


# bionic (malloc_heapprofd.cpp, Android 10 and later) answers the profiling signal by hooking
# malloc() alone, in its ephemeral dispatch table: the client loads at the process's next call of
# malloc() itself. realloc(), calloc() and the rest go past the hook, so a process that allocates
# through them only -- mksh (its allocator is realloc(), and it imports no malloc), toybox's sort
# (getline() and realloc()) -- is never reached, however much it allocates. Only the adb devices
# run bionic: the emulator device's layer hooks realloc() and calloc() as well, and has no
# cpu_ticks.
_MALLOC_ONLY = ("bionic loads the profiler into a running process at its next call of malloc() "
                "itself, and realloc() and calloc() do not count (mksh and toybox's sort "
                "allocate with realloc() alone)")
_FROM_START = ("profile such a program from its start: `droidheap -- CMD`, or -n NAME before it "
               "starts; bionic then loads the profiler as its libc starts")
_NEXT_ALLOCATION = "has not connected yet; it will at its next allocation"


def cpu_ticks(device, pids):
    """The CPU time each of `pids` has taken (clock ticks), where the device says it
    (Device.cpu_ticks)."""
    ticks = {pid: device.cpu_ticks(pid) for pid in pids}
    return {pid: t for pid, t in ticks.items() if t is not None}


def _ran_since(device, pid, ticks):
    """True when `pid` took CPU time since `ticks` were read, False when not, None when it is
    gone or unknown."""
    if pid not in ticks:
        return None
    now = device.cpu_ticks(pid)
    return None if now is None else now > ticks[pid]


def not_connected_yet(device, pid, ticks):
    """What to say of signalled `pid` that has not connected yet."""
    ran = _ran_since(device, pid, ticks)
    if ran is None and pid in ticks:
        return "ended before it connected"
    if ran:
        return ("runs, but has not connected: it will at its next call of malloc() itself, "
                "which bionic waits for (the end of the session says more if it never comes)")
    if ran is False:
        return "has been idle since the profiling signal; it will connect at its next malloc()"
    return _NEXT_ALLOCATION


def malloc_only_reason(device, pid, ticks):
    """Why signalled `pid` was not profiled, at the end of the session; None when not known."""
    ran = _ran_since(device, pid, ticks)
    if ran:
        return (f"it ran, and never connected, so it never called malloc() since the profiling "
                f"signal: {_MALLOC_ONLY}. To {_FROM_START}")
    if ran is False:
        return "it was idle during the session: it connects at its next call of malloc()"
    return None
