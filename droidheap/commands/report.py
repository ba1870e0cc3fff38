"""`droidheap report PATH`: the top call sites, a bottom-up tree, exact totals and what was lost,
and leak suspects over continuous dumps, of an output directory, a trace or a pprof file."""
import json

import click

from droidheap.commands.output import symbols_option
from droidheap.commands.reading import html_option, load, path_argument, say_warnings, write_page
from droidheap.gc_pause import gc_paused


@click.command("report")
@path_argument
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--dump", type=click.IntRange(0), default=None, metavar="N",
              help="Report dump N of each process (default: the last taken while it ran, or "
                   "at its peak; the one after its exit when there is no other).")
@click.option("--top", type=click.IntRange(1), default=10, metavar="N",
              help="Call sites per table (default 10).")
@html_option
@symbols_option
@gc_paused
def command(path, as_json, dump, top, html, symbol_dirs):
    """Report what PATH (an output directory, a trace or a pprof file) says."""
    from droidheap.results.report import build_report, report_json
    from droidheap.results.text import format_report
    results = load(path, symbol_dirs)
    if html:
        from droidheap.results.page import page_data, page_title
        say_warnings(results)  # the text and JSON reports carry them
        write_page(page_data(results.profiles, page_title(results.profiles, str(path))), html)
        return
    report = build_report(results.profiles, results.warnings, dump, top)
    click.echo(json.dumps(report_json(report), indent=1) if as_json else format_report(report))
