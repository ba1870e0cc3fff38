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
        raise DroidheapError(f"shell needs a command: droidheap {_device_options(ctx.obj)}shell "
                             "-- CMD ARGS...")
    ctx.exit(open_device(ctx.obj).shell(list(argv)))


def _device_options(obj) -> str:
    """The device the user chose, as they chose it, for the example."""
    if obj["local"]:
        return "--local " + (f"--abi {obj['abi']} " if obj["abi"] else "")
    return f"-s {obj['serial']} " if obj["serial"] else ""
