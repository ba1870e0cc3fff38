"""What `report`, `diff` and `check` share: the PATH they read (an output directory, a trace or a
pprof file), how it is loaded and what loading it warned of, and --html."""
import os
import pathlib

import click

path_argument = click.argument("path", type=click.Path(path_type=pathlib.Path))
html_option = click.option("--html", type=click.Path(dir_okay=False, path_type=pathlib.Path),
                           metavar="FILE", help="Write the page (report.html) to FILE instead.")


def load(path: pathlib.Path, symbol_dirs):
    from droidheap.results.load import load_results  # a trace's readers load only for a trace
    from droidheap.symbol_dirs import search_dirs
    return load_results(path, search_dirs(symbol_dirs, os.environ))


def say_warnings(results) -> None:
    """What reading PATH warned of (a trace cut short, above all), for the commands whose output
    does not carry it: one line each, on stderr, before the output."""
    for warning in results.warnings:
        click.echo(f"warning: {warning}", err=True)


def write_page(data: dict, path: pathlib.Path) -> None:
    from droidheap.results.html import write_html
    write_html(data, path)
    click.echo(f"Wrote {path}")
