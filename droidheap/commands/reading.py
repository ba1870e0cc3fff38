"""What `report`, `diff` and `check` share: the PATH they read (an output directory, a trace or a
pprof file), how it is loaded and what loading it warned of, --html, and the growth within PATH
over the dumps --from and --to choose."""
import os
import pathlib

import click

path_argument = click.argument("path", type=click.Path(path_type=pathlib.Path))
html_option = click.option("--html", type=click.Path(dir_okay=False, path_type=pathlib.Path),
                           metavar="FILE", help="Write the page (report.html) to FILE instead.")


def span_options(command):
    """--from N and --to M: the dumps growth within PATH runs between (results/series.py)."""
    command = click.option("--to", "current_dump", type=click.IntRange(0), default=None,
                           metavar="M", help="Measure growth to dump M (default: the last taken "
                           "while the program ran; the peak with --dump-at-max; the dump at exit "
                           "when it is the only one).")(command)
    return click.option("--from", "base_dump", type=click.IntRange(0), default=None, metavar="N",
                        help="Measure growth from dump N (default: the first taken while the "
                        "program ran; the start of profiling when fewer were).")(command)


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


def growth_within(path: pathlib.Path, profiles, base_dump, current_dump):
    """Per process and heap, the growth within PATH (diff.series_growth), after a `warning:` line
    for each left out for lacking dump N or M."""
    from droidheap.results.diff import series_growth
    growth, left_out = series_growth(profiles, base_dump, current_dump, str(path))
    asked = " or ".join(f"dump {i}" for i in (base_dump, current_dump) if i is not None)
    for title in left_out:
        click.echo(f"warning: {title} lacks {asked}: left out", err=True)
    return growth
