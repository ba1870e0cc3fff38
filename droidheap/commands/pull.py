"""`droidheap [DEVICE OPTIONS] pull [-o DIR]`: collect what sessions that died left on the device
(their droidheap killed, the link to the device lost): each trace droidheapd wrote, as far as it
got, is pulled, converted and removed from the device.

The names the device lists are data: each trace's directory is named after it only when the name
is one droidheapd gives (safe_paths); another is left on the device, with a warning."""
import posixpath

import click

from droidheap.commands.device_choice import open_device
from droidheap.commands.output import convert_pulled, prepare_output, symbols_option
from droidheap.device.base import TRACE_PREFIX, TRACE_SUFFIX
from droidheap.errors import DroidheapError
from droidheap.safe_paths import UnsafePath, plain_name
from droidheap.session import pull_trace


def _local_name(remote: str) -> str:
    """The name of a listed trace's output directory: its file name without TRACE_SUFFIX."""
    name = plain_name(posixpath.basename(remote))
    if not (name.startswith(TRACE_PREFIX) and name.endswith(TRACE_SUFFIX)):
        raise UnsafePath(f"refused the trace name {name!r}: not one droidheapd gives")
    return name[:-len(TRACE_SUFFIX)]


@click.command("pull")
@click.option("-o", "--output", type=click.Path(),
              help="Output directory, new or empty (default: a new one); each trace's outputs go "
                   "in a directory named after it.")
@symbols_option
@click.pass_obj
def command(obj, output, symbol_dirs):
    """Pull, convert and remove the traces earlier sessions left on the device."""
    device = open_device(obj)
    for note in device.lock():
        click.echo(f"droidheap: {note}", err=True)
    failures = []
    try:
        traces = device.leftover_traces()
        if not traces:
            click.echo(f"droidheap: no trace left on {device.describe()}", err=True)
            return
        out = prepare_output(output)
        for remote in traces:
            try:
                trace_out = out / _local_name(remote)
                trace_out.mkdir(mode=0o700)  # fails for a name listed twice
            except UnsafePath as e:
                click.echo(f"droidheap: {remote}: {e}; left on the device", err=True)
                continue
            except OSError as e:
                click.echo(f"droidheap: {remote}: cannot create {trace_out}: {e.strerror}; "
                           "left on the device", err=True)
                continue
            raw = pull_trace(device, remote, trace_out)
            try:
                convert_pulled(raw, trace_out, device, symbol_dirs)
            except DroidheapError as e:  # the next one may still convert; this one is kept raw
                click.echo(f"droidheap: {remote}: {e}", err=True)
                failures.append(remote)
    finally:
        device.unlock()
    if failures:
        raise DroidheapError(f"{len(failures)} of {len(traces)} traces could not be converted; "
                             f"each is kept as raw-trace in {out}")
