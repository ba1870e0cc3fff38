"""Turns the group's device options into a Device."""
import pathlib

from droidheap.device import LocalDevice
from droidheap.errors import DroidheapError


def open_device(obj) -> LocalDevice:
    if not obj["local"]:
        raise DroidheapError("only the Linux emulator device is supported so far: add --local")
    root = pathlib.Path(obj["device_root"]) if obj["device_root"] else None
    return LocalDevice(root=root, abi=obj["abi"])
