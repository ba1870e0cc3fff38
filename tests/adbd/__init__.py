"""A test adbd: the device side of adb over TCP, serving the emulator device or Android 10's own
userland under qemu-user (stdlib only, run with `scripts/test_adbd`, which also puts droidheap on
the path for the emulator device's property store).

    packets.py           the transport packet codec
    transport.py         a host connection: handshake, streams, flow control
    shell_service.py     shell: and shell,v2:
    sync_service.py      sync: (push, pull, stat, list)
    device_root.py       the device's file system and how its programs run
    property_service.py  init's property service (bionic's protocol), over either device's store
    android_root.py      the Android device's file system, namespaces and qemu-user
    android_init.py      init's services and `on property:` triggers on the Android device
    prop_area.py         bionic's property area, /dev/__properties__
    binfmt.py            binfmt_misc registrations for arm64 and arm programs
    host_library.py      builds qemu_cmdline.c, a phone's /proc/PID/cmdline under qemu-user
    __main__.py          `scripts/test_adbd --port PORT [--root] [--android ROOTFS]`
"""
