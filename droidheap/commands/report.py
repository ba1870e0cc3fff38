"""`droidheap report PATH`: the top call sites, a bottom-up tree, exact totals and what was lost,
and leak suspects over continuous dumps, of an output directory, a trace or a pprof file."""
import json
import os
import pathlib

import click

from droidheap.commands.output import symbols_option

path_argument = click.argument("path", type=click.Path(path_type=pathlib.Path))
html_option = click.option("--html", type=click.Path(dir_okay=False, path_type=pathlib.Path),
                           metavar="FILE", help="Write the page (report.html) to FILE instead.")


def write_page(data: dict, path: pathlib.Path) -> None:
    from droidheap.results.html import write_html
    write_html(data, path)
    click.echo(f"Wrote {path}")


def load(path: pathlib.Path, symbol_dirs):
    from droidheap.results.load import load_results  # protobuf loads only when needed
    from droidheap.symbolizer import search_dirs
    return load_results(path, search_dirs(symbol_dirs, os.environ))


@click.command("report")
@path_argument
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--dump", type=click.IntRange(0), default=None, metavar="N",
              help="Report dump N of each process (default: the last).")
@click.option("--top", type=click.IntRange(1), default=10, metavar="N",
              help="Call sites per table (default 10).")
@html_option
@symbols_option
def command(path, as_json, dump, top, html, symbol_dirs):
    """Report what PATH (an output directory, a trace or a pprof file) says."""
    from droidheap.results.report import build_report, report_json
    from droidheap.results.text import format_report
    results = load(path, symbol_dirs)
    if html:
        from droidheap.results.page import page_data, page_title
        write_page(page_data(results.profiles, page_title(results.profiles, str(path))), html)
        return
    report = build_report(results.profiles, results.warnings, dump, top)
    click.echo(json.dumps(report_json(report), indent=1) if as_json else format_report(report))
