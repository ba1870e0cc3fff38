"""The test device's file system: a device root directory laid out like the emulator device's
(droidheap/device/local.py) and seen by every program run through adb as `/`.

Why a chroot in a fresh mount namespace, per command: paths must mean on `adb shell` what they
mean to `adb push` (/data/local/tmp, /system/bin, /dev/socket), on a Debian host that has none of
them. Binding the device's directories over the host's own /data or /system would need those
mount points created on the host; a chroot over the device root needs nothing outside it: the
host's /usr, /etc, /proc and a few /dev nodes are bound into the root, inside a mount namespace
made by `unshare --mount` for that one command, so the mounts vanish with it and nothing is left
to clean up when this adbd is killed. Needs root (we are, here and in CI).

Owned by the server; immutable after `prepare()`, so service threads share it freely.
"""
import os
import pathlib
import platform
import shutil
import subprocess
from typing import Dict, List, Sequence

SHELL_UID = 2000  # AID_SHELL
SHELL_GROUPS = "2000,3003,3009"  # shell, inet, readproc
EMULATED_LIBC = "system/lib64/libdroidheap_libc.so"

# Host directories the device's programs need (the dynamic loader, libraries, /proc): bound in.
_HOST_DIRS = ("usr", "etc", "proc", "sys", "opt", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
_HOST_DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty", "ptmx")
_HOST_DEV_DIRS = ("pts", "shm")
# The device's own tree, as on a phone (and as in local.py's emulator device).
_DEVICE_DIRS = {"system/bin": 0o755, "system/lib64": 0o755, "system/xbin": 0o755,
                "data": 0o771, "data/local": 0o751, "data/local/tmp": 0o771,
                "data/misc/perfetto-traces": 0o773, "dev/socket": 0o755, "sdcard": 0o770}
# Directories the shell user owns on a phone.
_SHELL_OWNED = ("data/local/tmp", "sdcard")
_TOOLS = pathlib.Path(__file__).resolve().parent / "bin"

# Runs in the new mount namespace as root: $1 the device root, $2... the chroot arguments.
_ENTER = """set -e
r=$1; shift
for d in $DH_BIND_DIRS; do mount --rbind "/$d" "$r/$d"; done
for n in $DH_BIND_DEV; do mount --bind "/dev/$n" "$r/dev/$n"; done
unset DH_BIND_DIRS DH_BIND_DEV
exec chroot "$@"
"""


def host_abi() -> str:
    return {"x86_64": "x86_64", "aarch64": "arm64-v8a"}.get(platform.machine(), platform.machine())


class DeviceRoot:
    def __init__(self, path: pathlib.Path, as_root: bool):
        self.path = path.absolute()
        self.as_root = as_root
        self._bind_dirs: List[str] = []
        self._host_names: List[str] = []  # top-level names that are the host's own (or links)

    def prepare(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        os.chmod(self.path, 0o755)  # mkdtemp's 0700 would keep the shell user out of `/`
        for name in _HOST_DIRS:
            host = pathlib.Path("/") / name
            inside = self.path / name
            if host.is_symlink():
                if not inside.is_symlink():
                    inside.symlink_to(os.readlink(host))
                self._host_names.append(name)
            elif host.is_dir():
                inside.mkdir(exist_ok=True)
                self._bind_dirs.append(name)
                self._host_names.append(name)
        for relative, mode in _DEVICE_DIRS.items():
            (self.path / relative).mkdir(parents=True, exist_ok=True)
            os.chmod(self.path / relative, mode)
        for relative in _SHELL_OWNED:
            os.chown(self.path / relative, SHELL_UID, SHELL_UID)
        (self.path / "tmp").mkdir(exist_ok=True)
        os.chmod(self.path / "tmp", 0o1777)
        for node in _HOST_DEV_NODES:
            (self.path / "dev" / node).touch()
        for directory in _HOST_DEV_DIRS:
            (self.path / "dev" / directory).mkdir(exist_ok=True)
            self._bind_dirs.append(f"dev/{directory}")
        fd = self.path / "dev" / "fd"
        if not fd.is_symlink():
            fd.symlink_to("/proc/self/fd")
        # The device's own tools (getprop, setprop, pidof...) and a /system/bin/sh, as on Android.
        for tool in _TOOLS.iterdir():
            shutil.copy2(tool, self.path / "system" / "bin" / tool.name)
        sh = self.path / "system" / "bin" / "sh"
        if not sh.is_symlink():
            sh.symlink_to("/bin/sh")

    def check(self) -> None:
        """Runs one command as the device would, so a machine where that cannot work (not root,
        no unshare) fails at start with the reason, not on every adb shell."""
        process = self.popen(["/system/bin/sh", "-c", "test -d /data/local/tmp"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        output = process.communicate()[0].decode(errors="replace").strip()
        if process.returncode != 0:
            raise OSError(f"cannot run commands in the device root {self.path} (root and "
                          f"`unshare --mount` are needed): {output or 'no /data/local/tmp'}")

    def host_path(self, device_path: str) -> pathlib.Path:
        """Where a device path is on this machine: the host's own file for the directories bound
        in, the device root's otherwise (what the program run in the chroot sees)."""
        parts = [p for p in os.path.normpath("/" + device_path).split("/") if p]
        from_host = (parts and parts[0] in self._host_names) or (
            len(parts) > 1 and parts[0] == "dev" and parts[1] in _HOST_DEV_NODES + _HOST_DEV_DIRS)
        return pathlib.Path("/", *parts) if from_host else self.path.joinpath(*parts)

    def environment(self) -> Dict[str, str]:
        env = {"PATH": "/system/bin:/system/xbin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
               "HOME": "/", "TMPDIR": "/data/local/tmp", "ANDROID_DATA": "/data",
               "ANDROID_ROOT": "/system", "DROIDHEAP_DEVICE_ROOT": "/",
               "USER": "root" if self.as_root else "shell", "LANG": "C.UTF-8"}
        # The emulated bionic, once a session has pushed it: every program gets it, as every
        # program on a phone gets bionic.
        if (self.path / EMULATED_LIBC).is_file():
            env["LD_PRELOAD"] = "/" + EMULATED_LIBC
        return env

    def command(self, argv: Sequence[str]) -> List[str]:
        """argv run as a device program (as root with --root, else as the shell user)."""
        identity = [] if self.as_root else [f"--userspec={SHELL_UID}:{SHELL_UID}",
                                            f"--groups={SHELL_GROUPS}"]
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", _ENTER,
                "enter", str(self.path), *identity, str(self.path), *argv]

    def popen(self, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        env = self.environment()
        env["DH_BIND_DIRS"] = " ".join(self._bind_dirs)
        env["DH_BIND_DEV"] = " ".join(_HOST_DEV_NODES)
        # Its own process group, so a stream closed by the host can end the whole command.
        return subprocess.Popen(self.command(argv), env=env, start_new_session=True, **kwargs)
