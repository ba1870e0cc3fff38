"""Turns the group's device options into a Device: the emulator device with --local, else a
device over adb (-s/--serial, $ANDROID_SERIAL, or the only one connected)."""
import pathlib
import platform
import sys

import click

from droidheap import native
from droidheap.device import Device
from droidheap.errors import DroidheapError


def open_device(obj) -> Device:
    if obj["local"]:
        if obj["serial"]:
            raise DroidheapError("-s/--serial chooses an adb device: it cannot go with --local")
        if obj["mode"] != "auto" or obj["disable_selinux"]:
            raise DroidheapError("--mode and --disable-selinux apply to adb devices, not --local")
        # The emulator device is this machine, running glibc builds of the device side, reading
        # its /proc, flock()ing its root: only imported where it can run.
        if not sys.platform.startswith("linux"):
            raise DroidheapError(f"{native.EMULATOR_NEEDS} (scripts/install); this machine runs "
                                 f"{platform.system()}")
        from droidheap.device.local import LocalDevice
        root = pathlib.Path(obj["device_root"]) if obj["device_root"] else None
        return LocalDevice(root=root, abi=obj["abi"])
    if obj["abi"] or obj["device_root"]:
        raise DroidheapError("--abi and --device-root apply to the emulator device: add --local")
    # adbutils takes a fifth of a second to import: only adb devices pay for it.
    from droidheap.device.adb import AdbDevice
    device = AdbDevice(serial=obj["serial"], mode=obj["mode"],
                       disable_selinux=obj["disable_selinux"])
    click.echo(f"droidheap: {device.describe()}, {device.mode} mode", err=True)
    return device
