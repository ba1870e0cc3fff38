"""The default command: profile a program from its start (`-- CMD ARGS...`) or attach to running
processes (`-n NAME[,NAME]`, `-p PID[,PID]`), then pull, symbolize and convert the trace."""
import contextlib
import pathlib
import signal
import tempfile
import time

import click

from droidheap.commands.device_choice import open_device
from droidheap.device.local import program_name
from droidheap.errors import DroidheapError
from droidheap.session import ProfileOptions, Session

_CONNECT_TIMEOUT_S = 5.0
_EXIT_DUMP_TIMEOUT_S = 10.0


def _split_list(value, convert, what):
    if value is None:
        return []
    items = [item.strip() for item in value.split(",") if item.strip()]
    try:
        return [convert(item) for item in items]
    except ValueError:
        raise DroidheapError(f"invalid {what}: {value}") from None


def _prepare_output(output):
    if output is None:
        return pathlib.Path(tempfile.mkdtemp(prefix="droidheap-"))
    out = pathlib.Path(output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DroidheapError(f"output directory {out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    return out


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM stops a session as cleanly as Ctrl-C does."""
    def raise_interrupt(signum, frame):
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _note(message):
    click.echo(f"droidheap: {message}", err=True)


@click.command("profile", context_settings={"ignore_unknown_options": False})
@click.option("-n", "--name", "names", metavar="NAME[,NAME]", help="Attach to processes by name.")
@click.option("-p", "--pid", "pids", metavar="PID[,PID]", help="Attach to processes by pid.")
@click.option("-o", "--output", type=click.Path(), help="Output directory (default: a new one).")
@click.option("-d", "--duration", "duration_ms", type=int, default=0, metavar="MS",
              help="Stop attaching after MS milliseconds (default: until Ctrl-C or exit).")
@click.option("-i", "--interval", type=int, default=4096, metavar="BYTES",
              help="Mean sampling interval in bytes (1 = every allocation).")
@click.option("-c", "--continuous-dump", "dump_interval_ms", type=int, default=0, metavar="MS",
              help="Also dump every MS milliseconds.")
@click.option("--no-block-client", is_flag=True,
              help="End profiling instead of pausing the app when the buffer is full.")
@click.option("--shmem-size", type=int, default=8 * 1024 * 1024, metavar="BYTES",
              help="Shared buffer size per process (a power of two).")
@click.option("--seed", type=int, default=0, hidden=True, help="Sampler seed (tests).")
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def command(obj, names, pids, output, duration_ms, interval, dump_interval_ms, no_block_client,
            shmem_size, seed, argv):
    """Profile CMD from its start, or attach with -n/-p."""
    if interval < 1:
        raise DroidheapError("the sampling interval (-i) must be at least 1 byte")
    if duration_ms < 0 or dump_interval_ms < 0:
        raise DroidheapError("durations (-d, -c) cannot be negative")
    if shmem_size < 65536 or shmem_size & (shmem_size - 1):
        raise DroidheapError("--shmem-size must be a power of two of at least 65536")
    name_list = _split_list(names, str, "process name")
    pid_list = _split_list(pids, int, "pid")
    if sum(bool(x) for x in (argv, name_list, pid_list)) != 1:
        raise DroidheapError("give exactly one of: -- CMD ARGS..., -n NAME, -p PID")

    device = open_device(obj)
    options = ProfileOptions(sampling_interval=interval, dump_interval_ms=dump_interval_ms,
                             block_client=not no_block_client, shmem_size=shmem_size, seed=seed)
    targets = []
    if device.platform_profiler:
        pass  # the platform's heapprofd also waits for an app named -n to start
    elif argv:
        # Check the program before anything else, so a typo costs nothing.
        device.check_program(argv)
    else:
        targets = _resolve_targets(device, name_list, pid_list)
        if device.prefer_platform_profiler(targets):
            _note(f"{device.mode} mode: without root, droidheap can attach only to programs it "
                  f"started; the platform's heapprofd profiles these")
    if device.platform_profiler:
        _run_platform(device, options, argv, name_list, pid_list, duration_ms, output)
        return
    for pid in targets:
        device.check_attachable(pid)
    pid_list = targets
    for warning in device.check_profiler_binaries():
        _note(warning)
    out = _prepare_output(output)
    for note in device.lock():
        _note(note)
    try:
        with _sigterm_as_interrupt():
            session = Session(device, options)
            if argv:
                _run_spawned(device, session, list(argv))
            else:
                _run_attached(session, pid_list, duration_ms)
        _collect(session, out)
    except BaseException:
        # The first failure is what the user needs; one in undoing (a device gone) is a note.
        try:
            device.unlock()
        except DroidheapError as e:
            _note(f"warning: {e}")
        raise
    device.unlock()


def _resolve_targets(device, names, pids):
    resolved = []
    for name in names:
        found = device.pidof(name)
        if not found:
            raise DroidheapError(f"no process named {name} on {device.describe()}")
        resolved += found
    for pid in pids:
        if pid <= 0 or not device.process_exists(pid):
            raise DroidheapError(f"no process with pid {pid} on {device.describe()}")
        resolved.append(pid)
    return sorted(set(resolved))


def _run_spawned(device, session, argv):
    name = program_name(argv)
    try:
        session.start(names=[name])
        device.enable_at_start(name)
        profiling = True
    except DroidheapError as e:
        # As ddprof's wrapper does: the program runs even when profiling cannot.
        _note(f"warning: profiling cannot start ({e}); running {argv[0]} without it")
        profiling = False
    try:
        process = device.spawn(argv)
        code = _wait_for_program(process)
    finally:
        if profiling:
            device.disable_at_start(name)
    if code != 0:
        _note(f"{argv[0]} exited with status {code}")
    if not profiling:
        raise DroidheapError(f"{argv[0]} ran without profiling")
    if process.pid not in session.connected_pids():
        _note(f"warning: {argv[0]} (pid {process.pid}) never connected to droidheapd "
              "(statically linked, or no allocation at all?)")
    else:
        session.wait_until(lambda: process.pid in session.exited_pids(), _EXIT_DUMP_TIMEOUT_S)
    session.stop()


def _wait_for_program(process):
    while True:
        try:
            code = process.wait()
            return 128 - code if code < 0 else code
        except KeyboardInterrupt:
            # The terminal's Ctrl-C reached the program too; a SIGTERM to us is passed on.
            with contextlib.suppress(OSError):
                process.send_signal(signal.SIGTERM)


def _run_attached(session, pids, duration_ms):
    session.start(pids=pids, exit_when_clients_gone=True)
    try:
        session.wait_until(lambda: set(pids) <= session.connected_pids(), _CONNECT_TIMEOUT_S)
        connected = session.connected_pids()
        for pid in pids:
            if pid in connected:
                _note(f"attached to pid {pid}")
            else:
                _note(f"warning: pid {pid} has not connected yet; it will at its next allocation")
        deadline = time.monotonic() + duration_ms / 1000 if duration_ms else None
        while session.running() and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.05)
    except KeyboardInterrupt:
        _note("stopping")
    session.stop()


def _run_platform(device, options, argv, names, pids, duration_ms, output):
    from droidheap import platform_heapprofd as platform
    if argv:
        raise DroidheapError("--mode platform profiles running apps (-n/-p); the platform's "
                             "heapprofd cannot start a program")
    for name in names:
        if not platform.check_profileable(device, name).verified:
            _note(f"warning: {name}'s profileable flag cannot be read on this Android version; "
                  f"if it is not profileable the trace will hold no dump")
    for lack in platform.LACKS:
        _note(f"platform mode lacks {lack}")
    out = _prepare_output(output)
    with _sigterm_as_interrupt():
        raw = platform.run_platform_session(device, options, names, pids, duration_ms, out,
                                            note=_note)
    _convert(raw, out, device)


def _collect(session, out):
    try:
        raw = session.pull_trace(out)
        _convert(raw, out, session.device)
    except DroidheapError as e:
        if session.failure:
            raise DroidheapError(f"{session.failure}; no profile could be read ({e})") from None
        raise
    if session.failure:
        raise DroidheapError(f"{session.failure}; {out} holds what it had written before")


def _convert(raw, out, device):
    from droidheap.convert import convert_trace  # protobuf and pyelftools load only when needed
    # The device's own libraries, where this machine has no copy, are pulled beside the outputs.
    result = convert_trace(raw, out, fetch_files=lambda paths: device.fetch_files(
        paths, out / "device-files"))
    click.echo(result.summary_text)
    click.echo(f"Wrote profiles to {out}")
