"""The devices droidheap profiles on: everything above this package is device-agnostic."""
from droidheap.device.base import Device, DaemonProcess
from droidheap.device.local import LocalDevice

__all__ = ["Device", "DaemonProcess", "LocalDevice"]
