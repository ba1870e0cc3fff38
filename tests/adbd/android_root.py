"""The Android test device's file system: an Android userland (an archive as ../shared/android/
has it) unpacked into the device root, in a mount and a PID namespace of the device's own. Its
programs run natively when the userland is this machine's architecture (Android 11 x86_64 on an
x86_64 host), by qemu-user through binfmt_misc otherwise (Android 10 arm64; binfmt.py).

What the userland lacks, the device provides as a phone's init does, and only that: a /dev with
the usual nodes, /dev/socket and the property area (prop_area.py, written by the property
service), /proc of the device's own processes (its own PID namespace: toybox's pidof, killall
and ps see this device's programs only, as on a phone), /data/local/tmp owned by the shell user,
/system read-only, and the links to toybox's grep a phone has and the cut userland lacks. Under
qemu only: for qemu itself (a host program), the host's loader and libraries are bound at /lib64
and /lib/x86_64-linux-gnu, which Android does not use, and the device's /etc/ld.so.preload names
the libraries that give a program a phone's view of its command line (qemu_cmdline.c, as others
see it) and of its own maps (qemu_maps.c); only glibc's loader reads that file. A native device
has none of this: its programs and the kernel meet as on a phone.

The namespaces are held by a small reaper, the device's PID 1, as init reaps on a phone; it dies
with this adbd (and the kernel then kills every process of the device).

Owned by the server; immutable after `prepare()`, so service threads share it freely.
"""
import os
import pathlib
import platform
import shutil
import struct
import subprocess
import sys
from typing import Dict, List, Optional

from .device_root import _NSENTER, SHELL_UID, DeviceRoot
from .host_library import build_qemu_libraries

# What qemu (x86_64, dynamically linked) needs in the device root, bound from the host.
_QEMU_HOST_DIRS = ("lib64", "lib/x86_64-linux-gnu")
_DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty", "ptmx")
# The phone's directories and their owners and modes (Android 10's init.rc and fs_config).
_DIRS = {"data": (0, 0, 0o771), "data/local": (0, 0, 0o751),
         "data/local/tmp": (SHELL_UID, SHELL_UID, 0o771),
         "data/misc": (0, 0, 0o1771), "data/misc/perfetto-traces": (0, SHELL_UID, 0o773),
         "dev": (0, 0, 0o755), "dev/socket": (0, 0, 0o755), "dev/pts": (0, 0, 0o755),
         "sdcard": (0, 1015, 0o770), "mnt": (0, 0, 0o755), "tmp": (0, 0, 0o1777)}
_PRELOAD_LIBRARY_DIR = "system/etc/qemu-user"  # a host library for qemu only (see above)
# toybox applets a phone links in /system/bin that the cut userland does not.
_TOYBOX_LINKS = ("grep", "egrep", "fgrep")
# ELF e_machine of the host's architectures (Android 11's userland is x86_64's).
_HOST_MACHINES = {"x86_64": 62, "aarch64": 183}
# The phone's `perfetto` command, where the cut userland lacks it (Android 10's own needs binder):
# Perfetto's tracebox for Linux (x86_64, run natively with the host's libraries bound for qemu),
# installed under the name it answers to as the perfetto client, behind a script that points it
# at traced's consumer socket where Android has it (a Linux build looks elsewhere).
_PERFETTO_CLIENT = "system/etc/perfetto-client/perfetto"
_PERFETTO_SCRIPT = f"""#!/system/bin/sh
# The test device's perfetto command: Perfetto's tracebox (a Linux build) as the client.
export PERFETTO_CONSUMER_SOCK_NAME=/dev/socket/traced_consumer
exec /{_PERFETTO_CLIENT} "$@"
"""

# Runs as the device's PID 1 in new mount and PID namespaces ($1: the device root): makes the
# mounts, says so, then reaps orphans as init does until the namespace is torn down.
_HOLD_NAMESPACE = """set -e
r=$1
for d in $DH_QEMU_DIRS; do mount --bind "/$d" "$r/$d"; done
for n in $DH_DEV_NODES; do mount --bind "/dev/$n" "$r/dev/$n"; done
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$r/dev/pts" 2>/dev/null \\
    || mount --bind /dev/pts "$r/dev/pts"
mount -t proc proc "$r/proc"
mount --rbind /sys "$r/sys"
mount --bind "$r/system" "$r/system"
mount -o remount,bind,ro "$r/system"
echo ready
exec "$DH_PYTHON" -c '
import os, signal
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
while True:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
    signal.sigtimedwait([signal.SIGCHLD], 1)
'
"""

ANDROID_PATH = "/product/bin:/apex/com.android.runtime/bin:/system/bin:/system/xbin:/vendor/bin"


def _elf_machine(path: pathlib.Path) -> int:
    with open(path, "rb") as f:
        header = f.read(20)
    if header[:4] != b"\x7fELF" or len(header) < 20:
        raise OSError(f"{path} is not an ELF file")
    return struct.unpack_from("<H", header, 18)[0]


class AndroidRoot(DeviceRoot):
    def __init__(self, path: pathlib.Path, as_root: bool):
        super().__init__(path, as_root)
        self.native = False

    def unpack(self, archive: pathlib.Path, tracebox: Optional[pathlib.Path] = None) -> None:
        """Lays the root out from the userland `archive` (a .tar.xz of Android's `/`), with
        `tracebox` as its perfetto command when the userland has none."""
        self.path.mkdir(parents=True, exist_ok=True)
        os.chmod(self.path, 0o755)
        result = subprocess.run(["tar", "-xJf", str(archive), "-C", str(self.path),
                                 "--numeric-owner", "--same-permissions"],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise OSError(f"cannot unpack {archive}: {result.stderr.strip()}")
        linker = self.resolve("/system/bin/linker64")
        if not linker.is_file():
            raise OSError(f"{archive} holds no Android userland (no /system/bin/linker64)")
        self.native = _elf_machine(linker) == _HOST_MACHINES.get(platform.machine())
        if not self.native:
            self._host_names = list(_QEMU_HOST_DIRS)
        for relative, (uid, gid, mode) in _DIRS.items():
            directory = self.path / relative
            directory.mkdir(parents=True, exist_ok=True)
            os.chown(directory, uid, gid)
            os.chmod(directory, mode)
        for name in self._host_names:
            (self.path / name).mkdir(parents=True, exist_ok=True)
        for node in _DEV_NODES:
            (self.path / "dev" / node).touch()
        fd = self.path / "dev" / "fd"
        if not fd.is_symlink():
            fd.symlink_to("/proc/self/fd")
        for applet in _TOYBOX_LINKS:
            link = self.path / "system/bin" / applet
            if not link.exists() and not link.is_symlink():
                link.symlink_to("toybox")
        own_perfetto = (self.path / "system/bin/perfetto").exists()
        if tracebox is not None and not own_perfetto:
            client = self.path / _PERFETTO_CLIENT
            client.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(tracebox, client)
            script = self.path / "system/bin/perfetto"
            script.write_text(_PERFETTO_SCRIPT)
            os.chmod(script, 0o755)
        if self.native:
            return
        library_dir = self.path / _PRELOAD_LIBRARY_DIR
        library_dir.mkdir(parents=True, exist_ok=True)
        preload = "".join(f"/{_PRELOAD_LIBRARY_DIR}/{library.name}\n"
                          for library in build_qemu_libraries(library_dir))
        (self.path / "system/etc/ld.so.preload").write_text(preload)

    def resolve(self, device_path: str) -> pathlib.Path:
        """Where `device_path` is in the unpacked root, its links followed as the device would
        (they are absolute within it: /system/bin/linker64 -> /apex/...)."""
        pending = [p for p in device_path.split("/") if p and p != "."]
        done: List[str] = []
        links = 0
        while pending:
            part = pending.pop(0)
            if part == "..":
                done = done[:-1]
                continue
            candidate = self.path.joinpath(*done, part)
            if not candidate.is_symlink():
                done.append(part)
                continue
            links += 1
            if links > 40:
                raise OSError(f"too many links in {device_path}")
            target = os.readlink(candidate)
            if target.startswith("/"):
                done = []
            pending = [p for p in target.split("/") if p and p != "."] + pending
        return self.path.joinpath(*done)

    def boot(self) -> None:
        """Makes the namespaces and mounts; every command then runs inside them."""
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
               "DH_QEMU_DIRS": " ".join(self._host_names), "DH_DEV_NODES": " ".join(_DEV_NODES),
               "DH_PYTHON": sys.executable}
        self._start_holder(["unshare", "--mount", "--pid", "--fork", "--kill-child",
                            "--propagation", "private", "--", "/bin/sh", "-c", _HOLD_NAMESPACE,
                            "hold", str(self.path)], env)

    def _enter(self) -> List[str]:
        # unshare made both namespaces and stays outside the PID one, its child is PID 1 there.
        holder = self._namespace_holder.pid
        return [_NSENTER, f"--mount=/proc/{holder}/ns/mnt",
                f"--pid=/proc/{holder}/ns/pid_for_children", "--"]

    def host_path(self, device_path: str) -> pathlib.Path:
        parts = [p for p in os.path.normpath("/" + device_path).split("/") if p]
        if not self.native and (parts[:1] == ["lib64"] or parts[:2] == ["lib", "x86_64-linux-gnu"]):
            return pathlib.Path("/", *parts)
        return self.path.joinpath(*parts)

    def environment(self) -> Dict[str, str]:
        # What adbd gives a shell on Android 10 (init.environ.rc), that programs look at.
        return {"PATH": ANDROID_PATH, "HOME": "/", "TMPDIR": "/data/local/tmp",
                "ANDROID_DATA": "/data", "ANDROID_ROOT": "/system",
                "ANDROID_RUNTIME_ROOT": "/apex/com.android.runtime",
                "ANDROID_TZDATA_ROOT": "/apex/com.android.tzdata",
                "ANDROID_STORAGE": "/storage", "EXTERNAL_STORAGE": "/sdcard",
                "USER": "root" if self.as_root else "shell", "LOGNAME": "root" if self.as_root
                else "shell", "SHELL": "/system/bin/sh", "HOSTNAME": "localhost"}
