"""`droidheap [DEVICE OPTIONS] pull [-o DIR]`: collect what sessions that died left on the device
(their droidheap killed, the link to the device lost): each trace droidheapd wrote, as far as it
got, is pulled, converted and removed from the device."""
import posixpath

import click

from droidheap.commands.device_choice import open_device
from droidheap.commands.output import convert_pulled, prepare_output, symbols_option
from droidheap.device.base import TRACE_SUFFIX
from droidheap.errors import DroidheapError
from droidheap.session import pull_trace


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
            trace_out = out / posixpath.basename(remote)[:-len(TRACE_SUFFIX)]
            trace_out.mkdir()
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
