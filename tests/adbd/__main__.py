"""scripts/test_adbd --port PORT [--root] [--device-root DIR]: serves one test device over TCP on
127.0.0.1 until killed. Prints `listening on 127.0.0.1:PORT` once a real adb server may
`adb connect` to it (PORT 0: a free port, printed).

Without --root programs run as the shell user (uid 2000) on a `user` build; with it as uid 0 on a
`userdebug` build where the platform's heapprofd runs, and `adb root` answers that adbd already
runs as root. With --libc32 it runs 32-bit programs as well. The device root is a new temporary
directory (removed at exit) unless --device-root names one.

With --android ARCHIVE the device is Android's own userland (../shared/android/'s rootfs of
Android 10 arm64, run under qemu-user, or of Android 11 x86_64, run natively; android_root.py):
its bionic, toybox and mksh, a real property area and init's property service and services
(android_init.py): traced and traced_probes, as `persist.traced.enable=1` starts them, and with
--root the platform's heapprofd, as `persist.heapprofd.enable=1` does on a userdebug phone; its
perfetto command is its own, or Perfetto's tracebox where it has none (--perfetto).

The main thread accepts; each connection is served on its own thread.
"""
import argparse
import os
import pathlib
import shutil
import signal
import socket
import sys
import tempfile
import threading

from droidheap import native  # stdlib only, as errors.py

from . import shell_service, sync_service
from . import binfmt
from .android_init import AndroidInit
from .android_root import AndroidRoot
from .device_root import DeviceRoot
from .prop_area import PropertyArea
from .property_service import PropertyService, TextStore
from .transport import Connection, Stream


# The 32-bit ABI a 64-bit device also runs.
_TWIN_ABIS = {"x86_64": "x86", "arm64-v8a": "armeabi-v7a"}


def _properties(as_root: bool, abi: str, with_32_bit: bool) -> dict:
    abi32 = _TWIN_ABIS.get(abi, "") if with_32_bit else ""
    return {"ro.product.cpu.abi": abi,
            "ro.product.cpu.abilist": ",".join(filter(None, [abi, abi32])),
            "ro.product.cpu.abilist64": abi, "ro.product.cpu.abilist32": abi32,
            "init.svc.heapprofd": "running" if as_root else "",
            "ro.build.version.sdk": "34",
            "ro.build.version.release": "14",
            "ro.build.type": "userdebug" if as_root else "user",
            "ro.debuggable": "1" if as_root else "0",
            "ro.product.model": "droidheap_test_device", "ro.product.name": "droidheap_test",
            "ro.product.device": "droidheap_test", "service.adb.root": "1" if as_root else ""}


# What init sets on a booted userdebug phone besides build.prop (Android 10's init and its
# ramdisk's default.prop), that droidheap and the platform's programs read.
def _android_properties(build_prop: str, as_root: bool, runs_32_bit: bool) -> dict:
    props = {}
    for line in build_prop.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            props[key.strip()] = value.strip()
    if not runs_32_bit:  # a userland cut to 64-bit (Android 11's): only the ABIs it runs
        props["ro.product.cpu.abilist"] = props.get("ro.product.cpu.abilist64",
                                                    props.get("ro.product.cpu.abi", ""))
        props["ro.product.cpu.abilist32"] = ""
    for field in ("brand", "device", "manufacturer", "model", "name"):  # as init derives them
        props.setdefault(f"ro.product.{field}", props.get(f"ro.product.system.{field}", ""))
    props.update({"ro.debuggable": "1", "ro.secure": "1", "ro.adb.secure": "0",
                  "ro.property_service.version": "2", "sys.boot_completed": "1",
                  "init.svc.adbd": "running", "service.adb.root": "1" if as_root else "0"})
    # Perfetto's tracing service runs, as on phones that enable it (init starts traced and
    # traced_probes on this property, perfetto.rc).
    props["persist.traced.enable"] = "1"
    if as_root:
        props["persist.heapprofd.enable"] = "1"
    return props


def _android_device(args, root_path: pathlib.Path):
    device = AndroidRoot(root_path, as_root=args.root)
    tracebox = args.perfetto or _installed_tracebox()
    if tracebox is None:
        _log("no tracebox (scripts/install_test_tools unpacks it from ../shared/tools): the device has no "
             "perfetto command")
    device.unpack(args.android, tracebox)
    if not device.native:
        binfmt.register()
    area = PropertyArea(device.host_path("/dev/__properties__"))
    init = AndroidInit(device)
    properties = PropertyService(area, device.host_path("/dev/socket/property_service"), init)
    properties.write(_android_properties(
        device.host_path("/system/build.prop").read_text(errors="replace"), args.root,
        runs_32_bit=device.resolve("/system/bin/linker").is_file()))
    device.boot()
    device.check()
    properties.start()
    init.boot(properties)
    return device, properties


def _emulator_device(args, root_path: pathlib.Path):
    device = DeviceRoot(root_path, as_root=args.root)
    libcs = {64: args.libc or _installed_libc(), 32: args.libc32}
    # A userdebug phone after `adb root`: the platform's heapprofd runs (droidheap stops it).
    device.prepare({bits: libc for bits, libc in libcs.items() if libc}, args.root)
    device.check()
    properties = PropertyService(TextStore(device.path),
                                 device.host_path("/dev/socket/property_service"))
    properties.write(_properties(args.root, args.abi or native.host_abi(), args.libc32 is not None))
    properties.start()
    return device, properties


def _installed_libc():
    from droidheap.errors import DroidheapError
    try:
        directory = native.binary_dir(native.host_abi(), required=(native.EMULATED_LIBC,),
                                      target=native.LINUX)
    except DroidheapError:  # not built: programs then run without a bionic stand-in
        _log("no libdroidheap_libc.so found (pass --libc): programs cannot be profiled here")
        return None
    return directory / native.EMULATED_LIBC


def _installed_tracebox():
    """The tracebox scripts/install_test_tools unpacked beside the venv's Python."""
    path = pathlib.Path(sys.prefix) / "bin" / "tracebox"
    return path if path.is_file() else None


def _log(message: str) -> None:
    print(f"test_adbd: {message}", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(prog="test_adbd", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", action="store_true", help="adbd and shell commands run as root")
    parser.add_argument("--device-root", type=pathlib.Path,
                        help="the device's root directory (default: a new temporary one)")
    parser.add_argument("--abi", help="the ABI the device reports (default: this machine's; "
                                      "its programs are this machine's whatever it says)")
    parser.add_argument("--libc", type=pathlib.Path,
                        help="the device's bionic: droidheap's emulation layer, "
                             "libdroidheap_libc.so (default: the installed droidheap's)")
    parser.add_argument("--libc32", type=pathlib.Path,
                        help="the 32-bit emulation layer (e.g. a -m32 build): the device then "
                             "also runs 32-bit programs, as 64-bit phones do")
    parser.add_argument("--android", type=pathlib.Path, metavar="ROOTFS.tar.xz",
                        help="a device running this Android userland instead (natively when "
                             "it is this machine's architecture, under qemu-user otherwise)")
    parser.add_argument("--perfetto", type=pathlib.Path, metavar="TRACEBOX",
                        help="with --android: Perfetto's tracebox, the device's perfetto command "
                             "(default: the one scripts/install_test_tools unpacked into the venv)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        _log("needs root: it runs each command in its own mount namespace, as the shell user "
             "or as root")
        return 1

    temporary = args.device_root is None
    root_path = pathlib.Path(tempfile.mkdtemp(prefix="droidheap-adbd-")) if temporary \
        else args.device_root
    # SIGTERM ends the server as Ctrl-C does, so the temporary root is removed either way.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    device = None
    try:
        device, properties = (_android_device if args.android else _emulator_device)(
            args, root_path)

        def root_service(stream: Stream, rest: str) -> None:
            stream.write(b"adbd is already running as root\n" if args.root
                         else b"adbd cannot run as root in production builds\n")

        services = {
            "shell,": lambda stream, rest: shell_service.serve_v2(device, stream, rest),
            "shell:": lambda stream, rest: shell_service.serve_raw(device, stream, rest),
            "sync:": lambda stream, rest: sync_service.serve(device, stream, rest),
            "root:": root_service,
        }
        props = properties.read()
        banner = "".join(f"{key}={props[key]};" for key in
                         ("ro.product.name", "ro.product.model", "ro.product.device"))

        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", args.port))
        server.listen(8)
        print(f"listening on 127.0.0.1:{server.getsockname()[1]}", flush=True)
        while True:
            sock, _ = server.accept()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = Connection(sock, services, banner, _log)
            threading.Thread(target=connection.serve, daemon=True).start()
    except KeyboardInterrupt:
        return 0
    except OSError as e:
        _log(f"{e}")
        return 1
    finally:
        if device is not None:
            device.close()
        if temporary:
            shutil.rmtree(root_path, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
