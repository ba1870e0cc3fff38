"""The devices droidheap profiles on: everything above this package is device-agnostic."""
from droidheap.device.base import Device, DaemonProcess

# The emulator device (droidheap.device.local) is not imported here: it needs Linux (fcntl, this
# machine's /proc), and a phone session runs on any host.
__all__ = ["Device", "DaemonProcess"]
