"""`droidheap check OUT --max-growth BYTES [--site REGEX]`: a gate for CI. Exits 1, naming each
call site whose bytes in use grew past the bound from the first dump to the last (from when
profiling began, for a single dump)."""
import re

import click

from droidheap.commands.output import symbols_option
from droidheap.commands.reading import load, path_argument, say_warnings
from droidheap.gc_pause import gc_paused

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


class ByteSize(click.ParamType):
    """A size in bytes: 4096, 64k, 1.5MiB (k, M and G are powers of 1024)."""
    name = "bytes"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", value)
        if not match or match[2].lower() not in _UNITS:
            self.fail(f"{value!r} is not a size (e.g. 4096, 64k, 1.5MiB)", param, ctx)
        return int(float(match[1]) * _UNITS[match[2].lower()])


class Pattern(click.ParamType):
    name = "regex"

    def convert(self, value, param, ctx):
        try:
            return re.compile(value)
        except re.error as e:
            self.fail(f"{value!r} is not a regular expression: {e}", param, ctx)


def _matches(pattern, site) -> bool:
    return any(pattern.search(text) for text in (str(site), site.file, site.module) if text)


@click.command("check")
@path_argument
@click.option("--max-growth", required=True, type=ByteSize(), metavar="BYTES",
              help="Fail when a call site's bytes in use grew by more (4096, 64k, 1.5MiB).")
@click.option("--site", "site_pattern", type=Pattern(), default=None, metavar="REGEX",
              help="Check only the call sites whose name, file or module matches.")
@symbols_option
@click.pass_context
@gc_paused
def command(ctx, path, max_growth, site_pattern, symbol_dirs):
    """Exit 1 when a call site in PATH grew past --max-growth between its first and last dump."""
    from droidheap.errors import DroidheapError
    from droidheap.results.diff import first_to_last
    from droidheap.results.text import human_bytes, signed_bytes
    results = load(path, symbol_dirs)
    say_warnings(results)
    series = first_to_last(results.profiles)
    if not series:
        raise DroidheapError(f"{path} has no dumps to check (dumps at the peak are not a series)")
    failed, largest = [], None
    for s in series:
        since = f"dump {s.base.dump_index}" if s.base else "the start of profiling"
        for g in s.growth:
            if site_pattern and not _matches(site_pattern, g.site):
                continue
            if largest is None or g.in_use_delta > largest[0].in_use_delta:
                largest = (g, s, since)
            if g.in_use_delta > max_growth:
                failed.append(f"{g.site} grew by {human_bytes(g.in_use_delta)} in "
                              f"{s.current.series_title} from {since} to dump "
                              f"{s.current.dump_index} (bound {human_bytes(max_growth)})")
    for line in failed:
        click.echo(f"FAIL: {line}")
    if failed:
        ctx.exit(1)
    if largest is None:
        click.echo("ok: no call site matched" if site_pattern else "ok: nothing was allocated")
    else:
        g, s, since = largest
        click.echo(f"ok: no call site grew by more than {human_bytes(max_growth)}; the most, "
                   f"{signed_bytes(g.in_use_delta)}, was {g.site} in {s.current.series_title} "
                   f"from {since}")
