"""droidheap's command line: one group, a module per command (droidheap/commands/).

    droidheap [--local [--abi ABI]] [options] -- CMD ARGS...        profile CMD from its start
    droidheap [--local [--abi ABI]] [options] -n NAME[,NAME] | -p PID[,PID] | --all
                                                                    profile running (and, by
                                                                    name or --all, starting)
                                                                    processes
    droidheap [--local [--abi ABI]] shell -- CMD ARGS...            run CMD on the device
    droidheap [--local [--abi ABI]] pull [-o DIR]                   collect the traces sessions
                                                                    that died left on the device

Without --local the device is reached over adb (-s SERIAL, else $ANDROID_SERIAL, else the only
one connected).

The profiling command is the default: it runs when no subcommand name comes before `--`.
"""
import sys

import click

from droidheap.commands import check, diff, profile, pull, report, shell, symbolize
from droidheap.errors import DroidheapError
from droidheap.terminal import escaped_output

# Device selection: accepted anywhere before `--` and handed to the group.
_DEVICE_FLAGS = {"--local", "--disable-selinux"}
_DEVICE_OPTIONS = {"--abi", "--device-root", "-s", "--serial", "--mode"}
# The group's own answers, which run no command.
_GROUP_ANSWERS = {"-h", "--help", "--version"}
_USAGE_FORMS = [
    "[DEVICE OPTIONS] [OPTIONS] -- CMD ARGS...      profile CMD from its start",
    "[DEVICE OPTIONS] [OPTIONS] -n NAME[,NAME]      processes by name, running and starting",
    "[DEVICE OPTIONS] [OPTIONS] -p PID[,PID]        running processes by pid",
    "[DEVICE OPTIONS] [OPTIONS] --all               every process, running and starting",
    "[DEVICE OPTIONS] shell -- CMD ARGS...          run CMD on the device",
    "[DEVICE OPTIONS] pull [-o DIR]                 collect the traces dead sessions left",
    "symbolize TRACE [-o DIR] [--symbols DIR]       symbolize and convert a trace again",
    "report PATH [--json] [--dump N]                top call sites, totals, leak suspects",
    "diff A [B] [--json]                            growth per call site, A to B or within A",
    "diff A [--from N] [--to M]                     growth within A from dump N to dump M",
    "check OUT [--max-growth BYTES] [--max-unreachable BYTES]    exit 1 past a bound, 2 on bad "
    "input",
    "check OUT --max-growth BYTES [--from N] [--to M]    the bound on growth from dump N to M",
]


class DroidheapGroup(click.Group):
    def parse_args(self, ctx, args):
        split = args.index("--") if "--" in args else len(args)
        head, tail = args[:split], args[split:]
        device_args, rest = [], []
        i = 0
        while i < len(head):
            arg = head[i]
            name = arg.split("=", 1)[0]
            if arg in _DEVICE_FLAGS or (name in _DEVICE_OPTIONS and "=" in arg):
                device_args.append(arg)
            elif arg in _DEVICE_OPTIONS and i + 1 < len(head):
                device_args += [arg, head[i + 1]]
                i += 1
            else:
                rest.append(arg)
            i += 1
        if len(rest) == 1 and rest[0] in _GROUP_ANSWERS:
            return super().parse_args(ctx, device_args + rest + tail)
        if not rest or rest[0] not in self.commands:
            rest = ["profile"] + rest
        return super().parse_args(ctx, device_args + rest + tail)

    def format_usage(self, ctx, formatter):
        for i, form in enumerate(_USAGE_FORMS):
            formatter.write(f"{'Usage:' if i == 0 else '':<6} {ctx.command_path} {form}\n")

    def format_options(self, ctx, formatter):
        """Device options, then the profiling command's (the default command), then commands."""
        def records(command, command_ctx):
            return [r for r in (p.get_help_record(command_ctx) for p in command.get_params(
                command_ctx)) if r]
        with formatter.section("Device options"):
            formatter.write_dl(records(self, ctx))
        profile_ctx = click.Context(profile.command, parent=ctx, info_name="profile")
        with formatter.section("Profiling options"):
            formatter.write_dl([r for r in records(profile.command, profile_ctx)
                                if r[0].startswith("-") and r[0] != "-h, --help"])
        self.format_commands(ctx, formatter)


@click.group(cls=DroidheapGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--local", is_flag=True, help="Use the Linux emulator device (this machine).")
@click.option("--abi", default=None, help="Emulator device ABI: x86_64 or arm64-v8a (qemu).")
@click.option("--device-root", type=click.Path(file_okay=False), default=None,
              help="Emulator device root directory (default: $DROIDHEAP_DEVICE_ROOT or "
                   "~/.cache/droidheap/device).")
@click.option("-s", "--serial", default=None,
              help="The adb device to use (default: $ANDROID_SERIAL, else the only one).")
@click.option("--mode", type=click.Choice(["auto", "root", "preload", "platform"]),
              default="auto",
              help="How an adb device is profiled: root (bionic's own routes), preload "
                   "(LD_PRELOAD, programs started by droidheap), platform (Android's own heapprofd, "
                   "profileable or debuggable apps), auto (root when the device has it; else "
                   "preload, or platform for processes droidheap did not start).")
@click.option("--disable-selinux", is_flag=True,
              help="Root mode: SELinux permissive for the session (restored at the end).")
@click.version_option(package_name="droidheap", prog_name="droidheap",
                      message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx, local, abi, device_root, serial, mode, disable_selinux):
    """droidheap: a native heap profiler for Android (and, with --local, for this machine).

    Profiles a program from its start or processes by name or pid, then writes a Perfetto trace,
    pprof files and a summary to the output directory. `killall -USR1 droidheapd` on the device
    dumps on demand."""
    ctx.obj = {"local": local, "abi": abi, "device_root": device_root, "serial": serial,
               "mode": mode, "disable_selinux": disable_selinux}


cli.add_command(profile.command)
cli.add_command(shell.command)
cli.add_command(pull.command)
cli.add_command(symbolize.command)
cli.add_command(report.command)
cli.add_command(diff.command)
cli.add_command(check.command)


def main(argv=None) -> int:
    with escaped_output():
        return _run(argv)


def _run(argv) -> int:
    try:
        # Outside standalone mode click returns ctx.exit()'s code instead of raising it.
        result = cli.main(args=argv, prog_name="droidheap", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except DroidheapError as e:
        print(f"droidheap: {e.message}", file=sys.stderr)
        return e.exit_code
    except click.exceptions.NoArgsIsHelpError as e:
        print(e.ctx.get_help())
        return 0
    except click.UsageError as e:
        print(f"droidheap: {e.format_message()} (see droidheap --help)", file=sys.stderr)
        return 2
    except click.exceptions.Exit as e:
        return e.exit_code
    except OSError as e:  # a file or device failure nothing more specific caught: still one line
        print(f"droidheap: {e}", file=sys.stderr)
        return 1
    except MemoryError:  # what is written is kept: every file is written whole or not at all
        print("droidheap: out of memory: the input is larger than this machine can hold",
              file=sys.stderr)
        return 1
    except click.Abort:
        print("droidheap: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
