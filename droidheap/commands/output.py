"""What the commands that convert a trace print when they are done."""
import pathlib

import click


def echo_conversion(result, out: pathlib.Path) -> None:
    click.echo(result.summary_text)
    click.echo(f"Wrote profiles to {out}")
