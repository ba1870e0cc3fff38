"""`droidheap shell -- CMD ARGS...`: run a program on the device, like `adb shell`."""
import click

from droidheap.commands.device_choice import open_device
from droidheap.errors import DroidheapError


@click.command("shell", context_settings={"ignore_unknown_options": True})
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def command(ctx, argv):
    """Run CMD on the device (its exit code is passed through)."""
    if not argv:
        raise DroidheapError("shell needs a command: droidheap --local shell -- CMD ARGS...")
    ctx.exit(open_device(ctx.obj).shell(list(argv)))
