"""`droidheap diff A [B]`: growth of bytes in use per call site, from A's last dumps to B's (two
output directories, traces or pprof files, i.e. two runs or two dumps; of a run, the dumps a report
opens on: the last taken while it ran, series.opening_dumps), or within A over the
dumps taken while the program ran, first to last (results/series.py: not to the dump after its
exit, which a program that frees at exit would make all shrinkage). `go tool pprof -base A.pb.gz
B.pb.gz` reads our pprof files the same way."""
import json
import pathlib

import click

from droidheap.commands.output import symbols_option
from droidheap.commands.reading import (growth_within, html_option, load, path_argument,
                                        say_warnings, span_options, write_page)
from droidheap.gc_pause import gc_paused


def _say_if_unrelated(base_path, base, current_path, current) -> None:
    """Two profiles of different programs are compared all the same (a program renamed is still
    itself), but not without a word."""
    from droidheap.results.diff import program_names
    before, after = program_names(base), program_names(current)
    if before and after and not before & after:
        click.echo(f"warning: {base_path} profiles {', '.join(sorted(before))} and {current_path} "
                   f"profiles {', '.join(sorted(after))}: different programs, compared as if one "
                   "had become the other", err=True)


def _labels(comparisons) -> tuple:
    """What a page of growth within one PATH is from and to: the dumps, when every process's heap
    was compared over the same ones."""
    spans = {(a, b) for a, b, *_ in comparisons}
    return spans.pop() if len(spans) == 1 else ("the first dumps", "the last dumps while running")


@click.command("diff")
@path_argument
@click.argument("current", required=False, type=click.Path(path_type=pathlib.Path))
@click.option("--json", "as_json", is_flag=True, help="Print the growth as JSON.")
@click.option("--top", type=click.IntRange(1), default=20, metavar="N",
              help="Call sites shown per heap (default 20).")
@span_options
@html_option
@symbols_option
@gc_paused
def command(path, current, as_json, top, base_dump, current_dump, html, symbol_dirs):
    """Growth per call site from PATH to CURRENT, or within PATH while the program ran: from its
    first dump to its last before the exit, or from dump N to dump M (--from, --to)."""
    from droidheap.results.diff import site_growth
    from droidheap.results.report import location_json
    from droidheap.results.series import opening_dumps
    from droidheap.results.text import format_growth
    if current is not None and (base_dump, current_dump) != (None, None):
        raise click.UsageError("--from and --to choose dumps within one PATH; with two, each "
                               "one's last dumps while running are compared")
    base_results = load(path, symbol_dirs)
    say_warnings(base_results)
    if current is None:
        comparisons = [(s.base.dump_name if s.base else "the start", s.current.dump_name,
                        s.current.series_title, s.growth)
                       for s in growth_within(path, base_results.profiles, base_dump,
                                              current_dump)]
    else:
        base = opening_dumps(base_results.profiles)
        current_results = load(current, symbol_dirs)
        say_warnings(current_results)
        after = opening_dumps(current_results.profiles)
        _say_if_unrelated(path, base_results.profiles, current, current_results.profiles)
        comparisons = [(str(path), str(current), f"heap {heap}",
                        site_growth([p for p in base if p.heap == heap],
                                    [p for p in after if p.heap == heap]))
                       for heap in sorted({p.heap for p in base + after})]
    if html:
        from droidheap.results.page import page_data
        profiles = base_results.profiles if current is None else after
        # One table of growth per page: the comparisons' sites, most grown first.
        growth = sorted((g for *_, growth in comparisons for g in growth),
                        key=lambda g: -g.in_use_delta)
        base_label, current_label = (str(path), str(current)) if current else _labels(comparisons)
        write_page(page_data(profiles, f"droidheap diff: {base_label} to {current_label}",
                             (base_label, current_label, growth)), html)
        return
    if as_json:
        click.echo(json.dumps([{
            "base": a, "current": b, "what": what,
            "sites": [{**location_json(g.site), "base_in_use_bytes": g.base.in_use_bytes,
                       "in_use_bytes": g.current.in_use_bytes, "in_use_delta": g.in_use_delta,
                       "in_use_count_delta": g.in_use_count_delta, "alloc_delta": g.alloc_delta}
                      for g in growth]} for a, b, what, growth in comparisons], indent=1))
        return
    blocks = [f"{what}\n{format_growth(growth, a, b, top)}" for a, b, what, growth in comparisons]
    click.echo("\n\n".join(blocks) or "No heap dumps to compare.")
