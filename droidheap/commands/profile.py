"""The default command: profile a program from its start (`-- CMD ARGS...`) or attach to running
processes (`-n NAME[,NAME]`, `-p PID[,PID]`), then pull, symbolize and convert the trace."""
import dataclasses
import re
import signal

import click

from droidheap.commands.device_choice import open_device
from droidheap.commands.output import convert_pulled, prepare_output, symbols_option
from droidheap.device.names import check_start_name, program_name
from droidheap.errors import DroidheapError
from droidheap.session import (DEFAULT_MAX_DAEMON_MEMORY, DEFAULT_MAX_TRACE_SIZE, ProfileOptions,
                               Session, target_args)
from droidheap.session_runs import (Targets, resolve_targets, run_attached, run_spawned,
                                    wait_for_program)
from droidheap.stop_signals import StopSignals

def _split_list(value, convert, what):
    if value is None:
        return []
    items = [item.strip() for item in value.split(",") if item.strip()]
    try:
        return [convert(item) for item in items]
    except ValueError:
        raise DroidheapError(f"invalid {what}: {value}") from None


def _note(message):
    click.echo(f"droidheap: {message}", err=True)


_UINT32_MAX = 2**32 - 1


def _shmem_size(ctx, param, value):
    # A page multiple too: every power of two from 8192 up is one of 4 KiB pages (droidheapd checks
    # the device's own page size).
    if value < 8192 or value > 2**32 or value & (value - 1):
        raise click.BadParameter(f"{value} is not a power of two from 8192 to 4 GiB")
    return value


# As droidheapd hands them to the client: each name NUL-terminated in 255 bytes in all.
_HEAP_NAME_BYTES = 63
_HEAP_NAMES_BYTES = 255
_HEAP_NAME = re.compile(r"[!-+\--~]+")  # printable ASCII, no space, no comma


def _heap_names(ctx, param, value):
    names = list(dict.fromkeys(_split_list(value, str, "heap name")))
    for name in names:
        if len(name) > _HEAP_NAME_BYTES or not _HEAP_NAME.fullmatch(name):
            raise click.BadParameter(f"{name!r} is not a heap name (printable ASCII, at most "
                                     f"{_HEAP_NAME_BYTES} bytes)")
    if sum(len(name) + 1 for name in names) > _HEAP_NAMES_BYTES:
        raise click.BadParameter(f"the names take more than {_HEAP_NAMES_BYTES} bytes")
    if value is not None and not names:
        raise click.BadParameter("no heap named")
    return tuple(names)


@click.command("profile", context_settings={"ignore_unknown_options": False})
@click.option("-n", "--name", "names", metavar="NAME[,NAME]",
              help="Profile processes by name (basename of argv[0], cut at '@'; an app's process "
                   "name): those running and those that start during the session. A glob "
                   "pattern ('com.example.*') takes the running processes it matches.")
@click.option("-p", "--pid", "pids", metavar="PID[,PID]", help="Profile processes by pid.")
@click.option("--all", "every_process", is_flag=True,
              help="Profile every process that can be: those running and those that start "
                   "during the session (on a rooted phone every process on bionic; without root "
                   "those started with `droidheap shell`; on --local those started on the "
                   "emulated device).")
@click.option("-i", "--interval", type=click.IntRange(1, 2**40), default=4096, metavar="BYTES",
              help="Mean sampling interval in bytes; 1 = every allocation. Default 4096.")
@click.option("-d", "--duration", "duration_ms", type=click.IntRange(0, _UINT32_MAX), default=0,
              metavar="MS", help="Profile for MS milliseconds; 0 (default) = until Ctrl-C, or "
                                 "until the profiled processes exit.")
@click.option("-c", "--continuous-dump", "dump_interval_ms", type=click.IntRange(0, _UINT32_MAX),
              default=0, metavar="MS", help="Also dump every MS milliseconds; 0 = never.")
@click.option("--unreachable", is_flag=True,
              help="At each dump and as a process exits, also find the sampled blocks in use "
                   "that nothing in the process points to any more (a conservative sweep of a "
                   "copy of it, forked while its threads are held), and say what they hold. "
                   "Needs droidheap's own client: not in platform mode.")
@click.option("--dump-at-max", is_flag=True,
              help="Each dump holds what was in use when the process's sampled heap was at its "
                   "largest so far, instead of what is in use at the dump.")
@click.option("--block-client/--no-block-client", default=True,
              help="When the shared buffer is full, pause the allocating thread until there is "
                   "room (default), or end that process's profile instead.")
@click.option("--block-client-timeout", "block_client_timeout_us",
              type=click.IntRange(1, _UINT32_MAX), default=5_000_000, metavar="US",
              help="With --block-client, end a process's profile when an allocation waited US "
                   "microseconds with droidheapd reading nothing of its buffer. Default 5000000.")
@click.option("--shmem-size", type=int, default=8 * 1024 * 1024, callback=_shmem_size,
              metavar="BYTES", help="Shared buffer per process: a power of two, at least 8192. "
                                    "Default 8 MiB.")
@click.option("--max-daemon-memory", type=click.IntRange(0), default=DEFAULT_MAX_DAEMON_MEMORY,
              metavar="BYTES", help="What droidheapd's bookkeeping (call stacks, live blocks) "
                                    "may take for the session; past it, the process that grew "
                                    "it ends its profile. 0 = no cap. Default 512 MiB.")
@click.option("--max-trace-size", type=click.IntRange(0), default=DEFAULT_MAX_TRACE_SIZE,
              metavar="BYTES", help="What the trace may take on the device; past it, the "
                                    "session stops with the dumps written. 0 = no cap. "
                                    "Default 2 GiB.")
@click.option("--exact-totals/--no-exact-totals", default=True,
              help="Count every allocation and free beside the samples (default); without, "
                   "the unsampled calls cost about 1 ns instead of 5.")
@click.option("--heaps", callback=_heap_names, metavar="NAME[,NAME]",
              help="Record these heaps: libc's is libc.malloc, the others a program registers "
                   "through droidheap/heaps.h. Default: libc.malloc alone.")
@click.option("--all-heaps", is_flag=True,
              help="Record every heap: libc.malloc and every heap a program registers.")
@click.option("--disable-fork-teardown", is_flag=True,
              help="Profile a forked child as a process of its own, from the fork on, instead "
                   "of only leaving it out.")
@click.option("--no-running", is_flag=True,
              help="With -n: only processes that start during the session.")
@click.option("--no-startup", is_flag=True,
              help="With -n: only processes already running.")
@click.option("--print-config", is_flag=True,
              help="Print what would be run on the device, and do nothing.")
@click.option("-o", "--output", type=click.Path(), help="Output directory, new or empty "
                                                         "(default: a new one).")
@symbols_option
@click.option("--seed", type=int, default=0, hidden=True, help="Sampler seed (tests).")
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def command(obj, names, pids, every_process, interval, duration_ms, dump_interval_ms, unreachable,
            dump_at_max, block_client, block_client_timeout_us, shmem_size, max_daemon_memory, max_trace_size,
            exact_totals, heaps, all_heaps, disable_fork_teardown, no_running, no_startup,
            print_config, output, symbol_dirs, seed, argv):
    """Profile CMD from its start, or processes by name or pid."""
    name_list = _split_list(names, str, "process name")
    pid_list = _split_list(pids, int, "pid")
    targets = Targets(name_list, pid_list, every_process, running=not no_running,
                      startup=not no_startup)
    _check_targets(targets, argv)
    if heaps and all_heaps:
        raise click.UsageError("--all-heaps already records every heap: no --heaps with it")
    options = ProfileOptions(sampling_interval=interval, dump_interval_ms=dump_interval_ms,
                             dump_at_max=dump_at_max, block_client=block_client,
                             block_client_timeout_us=block_client_timeout_us,
                             shmem_size=shmem_size, max_daemon_memory=max_daemon_memory,
                             max_trace_size=max_trace_size, exact_totals=exact_totals,
                             fork_teardown=not disable_fork_teardown, heaps=heaps,
                             all_heaps=all_heaps, seed=seed, unreachable=unreachable)
    if print_config:
        _print_config(obj, options, targets, argv, duration_ms)
        return

    device = open_device(obj)
    # Before the device is touched: a name that cannot become bionic's start property.
    if not device.platform_profiler:
        if argv and device.spawn_names_start_property():
            check_start_name(program_name(argv), "--mode preload starts it")
        elif not argv and device.can_profile_at_start():
            for name in targets.startup_names():
                check_start_name(name)
    # Root, and programs droidheap starts, need droidheap's own binaries: said before anything is
    # asked of the device (without root, a running app goes to the platform's heapprofd).
    binaries_checked = not device.platform_profiler and bool(argv or
                                                             device.can_profile_at_start())
    if binaries_checked:
        for warning in device.check_profiler_binaries():
            _note(warning)
    running = []
    if device.platform_profiler:
        pass  # the platform's heapprofd also waits for an app named -n to start
    elif argv:
        # Check the program before anything else, so a typo costs nothing.
        device.check_program(argv)
    else:
        if (targets.startup_names() or targets.every_process) and targets.startup \
                and not device.can_profile_at_start():
            if not targets.running:
                raise DroidheapError(f"{device.mode} mode cannot profile a process from its start "
                                     f"unless droidheap starts it (-- CMD); root can")
            _note(f"{device.mode} mode: processes that start later are not profiled (root would "
                  f"profile them); the running ones are")
            targets.startup = False
        running = resolve_targets(device, targets, _note)
        _say_what_patterns_take(targets)
        if device.prefer_platform_profiler(running):
            _note(f"{device.mode} mode: without root, droidheap can attach only to programs it "
                  f"started; the platform's heapprofd profiles these")
    if device.platform_profiler:
        if unreachable:
            raise DroidheapError(_PLATFORM_CANNOT_SWEEP)
        return _run_platform(device, options, argv, targets, duration_ms, output, symbol_dirs)
    for pid in running:
        device.check_attachable(pid)
    if not binaries_checked:
        for warning in device.check_profiler_binaries():
            _note(warning)
    out = prepare_output(output)
    for note in device.lock(own_program=bool(argv)):
        _note(note)
    for trace in device.leftover_traces():
        _note(f"an earlier session's trace is still on the device ({trace}): `droidheap pull` "
              f"collects it")
    session = Session(device, options)
    program_exit = unmatched = None
    try:
        with StopSignals() as stops:
            if argv:
                program_exit = run_spawned(device, session, list(argv), duration_ms, _note, stops)
            else:
                unmatched = run_attached(device, session, running, targets, duration_ms, _note)
        _collect(session, out, symbol_dirs)
    except BaseException:
        # The first failure is what the user needs; one in undoing (a device gone) is a note.
        for undo in (lambda: session.close(out), device.unlock):
            try:
                undo()
            except DroidheapError as e:
                _note(f"warning: {e}")
        raise
    try:
        session.close(out)
    finally:
        device.unlock()
    if unmatched:  # after the outputs, empty as they are: a mistyped name is still an error
        raise DroidheapError(f"{unmatched}; nothing was profiled")
    return _exit_status(program_exit, stops)


def _exit_status(program_exit, stops) -> int:
    """As `time` and strace exit: with the status of the program droidheap started (128+N when
    signal N ended it), or as a program stopped at Ctrl-C or SIGTERM would; 0 for processes
    attached to, whose session Ctrl-C ends as it should."""
    if program_exit is None:
        return 0
    return stops.exit_status or program_exit.status


def _say_what_patterns_take(targets) -> None:
    if targets.patterns() and targets.startup:
        _note(f"-n {','.join(targets.patterns())}: a pattern takes the running processes it "
              "matches, not those that start later: bionic looks a starting program up by its "
              "exact name (the property heapprofd.enable.<name>)")


def _check_targets(targets, argv) -> None:
    """Usage errors (exit 2): what cannot go together."""
    if argv and (targets.names or targets.pids or targets.every_process):
        raise click.UsageError("give either -- CMD ARGS... or -n/-p/--all, not both")
    if targets.every_process and (targets.names or targets.pids):
        raise click.UsageError("--all already takes every process: no -n or -p with it")
    if not argv and not targets.names and not targets.pids and not targets.every_process:
        raise click.UsageError("nothing to profile: give -- CMD ARGS..., -n NAME, -p PID or "
                               "--all")
    if not targets.running and not targets.startup:
        raise click.UsageError("--no-running and --no-startup together leave nothing to "
                               "profile")
    if argv and not targets.startup:
        raise click.UsageError("--no-startup cannot go with -- CMD: droidheap profiles it "
                               "from its start")
    if argv and not targets.running:
        raise click.UsageError("--no-running applies to -n, not to -- CMD")
    if targets.pids and not targets.running:
        raise click.UsageError("--no-running leaves -p nothing to profile: processes that "
                               "start later have other pids")
    if targets.patterns() and not targets.running:
        raise click.UsageError("--no-running leaves a pattern nothing to profile: it takes "
                               "running processes only")


_PLATFORM_CANNOT_SWEEP = ("--unreachable needs droidheap's own client in the process: the "
                          "platform's heapprofd (platform mode) cannot look for unreachable memory")


def _print_config(obj, options, targets, argv, duration_ms):
    if obj["mode"] == "platform":
        if options.unreachable:
            raise DroidheapError(_PLATFORM_CANNOT_SWEEP)
        from google.protobuf import text_format

        from droidheap import platform_heapprofd as platform
        names = [program_name(argv)] if argv else targets.names
        config = platform.pb.TraceConfig.FromString(platform.build_trace_config(
            options, names, targets.pids, duration_ms, targets.running, targets.startup,
            targets.every_process))
        click.echo(text_format.MessageToString(config), nl=False)
        if argv:
            click.echo(f"then starts: {' '.join(argv)} (profiled from its start)")
        return
    names = [program_name(argv)] if argv else targets.startup_names()
    pids = [] if argv or not targets.running else targets.pids
    words = ["droidheapd", *options.daemon_args(),
             *target_args(pids, names, targets.every_process and targets.startup)]
    if targets.names and targets.running and not argv:
        words.append(f"(and signals the running processes named {','.join(targets.names)})")
    if targets.every_process and targets.running:
        words.append("(and signals every running process that can be profiled)")
    click.echo(" ".join(words))
    if argv:
        click.echo(f"then starts: {' '.join(argv)} (profiled from its start)")


def _run_platform(device, options, argv, targets, duration_ms, output, symbol_dirs):
    from droidheap import platform_heapprofd as platform
    # A pattern's processes by pid: Android 10 and 11's heapprofd matches names exactly.
    names, pids, starter, namer = targets.exact_names(), targets.pids, None, None
    if targets.patterns():
        pids = resolve_targets(device, dataclasses.replace(targets, names=targets.patterns(),
                                                           pids=[]), _note) + pids
        _say_what_patterns_take(targets)
    if argv:
        if device.facts.build_type == "user":
            raise DroidheapError("--mode platform cannot start a program on a user build: there "
                                 "the platform's heapprofd profiles apps only (-n/-p); root or "
                                 "--mode preload would")
        names = [program_name(argv)]
        check_start_name(names[0])
        device.check_program(argv)
        starter = platform.ProgramStarter(device, argv, names[0])
    elif names:
        namer = platform.ProcessNamer(device, names, _note)
    for name in names:
        if not platform.check_profileable(device, name).verified:
            _note(f"warning: {name}'s profileable flag cannot be read on this Android version; "
                  f"if it is not profileable the trace will hold no dump")
    for lack in platform.LACKS:
        _note(f"platform mode lacks {lack}")
    out = prepare_output(output)
    program = None
    try:
        with StopSignals() as stops:
            raw = platform.run_platform_session(device, options, names, pids,
                                                duration_ms, out,
                                                stop_requested=starter or namer,
                                                note=_note, running=targets.running,
                                                startup=targets.startup,
                                                every_process=targets.every_process)
            program = starter and starter.program
            if program and program.poll() is None:  # -d is over, or Ctrl-C: as in root mode
                _note(f"stopped profiling; {argv[0]} goes on without it")
            program_exit = program and wait_for_program(program, 0, stops)
    except BaseException:
        if starter and starter.program and starter.program.poll() is None:
            starter.program.send_signal(signal.SIGTERM)
        raise
    if program_exit and program_exit.status:
        _note(f"{argv[0]} exited with status {program_exit.status}")
    # Android 10's process_stats names only the processes running as the session starts.
    argvs = {pid: words for pid, words in (namer.argvs if namer else {}).items() if words}
    exits = {}
    if program:
        argvs[program.pid] = argv
        exits[program.pid] = program_exit
    # The platform's heapprofd profiled only processes of that one name: those the namer did not
    # see run (gone between two of its polls) are named by it.
    only_name = [names[0]] if len(names) == 1 and not pids and not targets.every_process else None
    convert_pulled(raw, out, device, symbol_dirs, argvs, exits, only_name)
    return _exit_status(program_exit, stops)


def _collect(session, out, symbol_dirs):
    for warning in session.warnings():
        _note(f"warning: {warning}")
    for pid, found in session.unreachable_sweeps():
        _note(f"pid {pid}: unreachable: {found}")
    try:
        raw = session.pull_trace(out)
        convert_pulled(raw, out, session.device, symbol_dirs,
                       program_exits=session.program_exits)
    except DroidheapError as e:
        if session.failure:
            raise DroidheapError(f"{session.failure}; no profile could be read ({e})") from None
        raise
    if session.failure:
        raise DroidheapError(f"{session.failure}; {out} holds what it had written before")
