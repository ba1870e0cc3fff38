"""A test adbd: the device side of adb over TCP, serving the emulator device (stdlib only, run
with `scripts/test_adbd`, which also puts droidheap on the path for its property store).

    packets.py           the transport packet codec
    transport.py         a host connection: handshake, streams, flow control
    shell_service.py     shell: and shell,v2:
    sync_service.py      sync: (push, pull, stat, list)
    device_root.py       the device's file system and how its programs run
    property_service.py  getprop / setprop over the emulator device's property store
    __main__.py          `scripts/test_adbd --port PORT [--root]`
"""
