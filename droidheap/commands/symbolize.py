"""`droidheap symbolize TRACE [-o DIR]`: symbolize and convert a trace again, one pulled earlier
(droidheap's raw-trace or symbolized-trace) or a heapprofd trace from Perfetto's own tools, with
the symbol files this machine has now."""
import os
import pathlib

import click

from droidheap.commands.output import echo_conversion, symbols_option


@click.command("symbolize")
@click.argument("trace", type=click.Path(path_type=pathlib.Path))
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=pathlib.Path),
              help="Where the outputs go (default: the trace's directory).")
@symbols_option
def command(trace, output, symbol_dirs):
    """Symbolize TRACE and write its symbolized trace, pprof files and summary again."""
    from droidheap.convert import convert_trace  # protobuf and pyelftools load only when needed
    from droidheap.symbol_dirs import search_dirs
    out = output or trace.parent
    echo_conversion(convert_trace(trace, out, search_dirs(symbol_dirs, os.environ)), out)
