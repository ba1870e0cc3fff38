"""Where the commands that convert a trace write, and what they print when they are done."""
import os
import pathlib
import tempfile

import click

from droidheap.errors import DroidheapError


symbols_option = click.option(
    "--symbols", "symbol_dirs", multiple=True, metavar="DIR",
    type=click.Path(exists=True, file_okay=False, path_type=pathlib.Path),
    help="Look for unstripped libraries and programs here first (as DIR/<device path> or "
         "DIR/<file name>, then anywhere below DIR by name or build id: an app's build "
         "directory); repeatable. PERFETTO_BINARY_PATH and $ANDROID_PRODUCT_OUT/symbols are "
         "searched after.")


def prepare_output(output) -> pathlib.Path:
    """The output directory: `output`, new or empty, else a new temporary one."""
    if output is None:
        return pathlib.Path(tempfile.mkdtemp(prefix="droidheap-"))
    out = pathlib.Path(output)
    if out.exists() and not out.is_dir():
        raise DroidheapError(f"-o {out} is a file: -o names the directory the outputs go into "
                             "(new, or empty)")
    if out.exists() and any(out.iterdir()):
        raise DroidheapError(f"output directory {out} is not empty")
    try:
        out.mkdir(parents=True, exist_ok=True, mode=0o700)  # as mkdtemp's (output_files)
    except OSError as e:
        raise DroidheapError(f"cannot make the output directory {out}: {e.strerror}") from None
    return out


def echo_conversion(result, out: pathlib.Path) -> None:
    """The summary, then the outputs, report.html first: the page to open. On stderr, as
    droidheap's own lines are, so that a profiled program's output is its own (`droidheap --
    prog > file`); `droidheap report` prints the summary's figures as a result."""
    def say(line):
        click.echo(line, err=True)
    say(result.summary_text)
    say(f"Wrote profiles to {out}:")
    say(f"  {result.html_report}  (open it in a browser)")
    say(f"  {result.symbolized_trace}  (open it in ui.perfetto.dev)")
    if result.pprof_files:
        # One file per process, heap and dump, each cumulative: the last dump of a process.
        first = result.pprof_files[0]
        last = max((f for f in result.pprof_files
                    if (f.pid, f.heap_name) == (first.pid, first.heap_name)),
                   key=lambda f: f.dump_index)
        count = len(result.pprof_files)
        which = "" if count == 1 else (f"{count} pprof files, one per process, heap and dump; "
                                       f"the last of pid {last.pid}: ")
        say(f"  {which}go tool pprof -top {last.path}")


def convert_pulled(raw: pathlib.Path, out: pathlib.Path, device, symbol_dirs,
                   process_argvs=None, program_exits=None, profiled_as=None) -> None:
    """Symbolizes and converts a trace pulled from `device` into `out` (see convert_trace)."""
    from droidheap.convert import convert_trace  # protobuf and pyelftools load only when needed
    from droidheap.device_files import fetch_device_files
    from droidheap.symbol_dirs import search_dirs
    # The device's own libraries, where this machine has no copy, are pulled beside the outputs.
    result = convert_trace(raw, out, search_dirs(symbol_dirs, os.environ),
                           fetch_files=lambda modules, warnings: fetch_device_files(
                               device, modules, out / "device-files", warnings=warnings),
                           process_argvs=process_argvs, program_exits=program_exits,
                           made_locally=device.files_are_this_machines, profiled_as=profiled_as)
    echo_conversion(result, out)
