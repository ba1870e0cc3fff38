"""The test device's file system: a device root directory laid out like the emulator device's
(droidheap/device/local.py) and seen by every program run through adb as `/`.

Why a chroot in a mount namespace of its own: paths must mean on `adb shell` what they mean to
`adb push` (/data/local/tmp, /system/bin, /dev/socket), on a Debian host that has none of them.
Binding the device's directories over the host's own /data or /system would need those mount
points created on the host; a chroot over the device root needs nothing outside it: the host's
/usr, /etc, /proc and a few /dev nodes are bound into the root, inside one mount namespace made
by `unshare --mount` when this adbd starts. Every command enters that namespace (nsenter) and the
chroot, so all of them see the same mounts, as all of a phone's shell commands do -- a mount made
by one (a root session's bind mount) is seen by the next, and a daemon reads the same paths in a
program's /proc/PID/maps as the program has. The namespace is held by one `sleep` process, which
dies with this adbd, taking the mounts with it. Needs root (we are, here and in CI).

Owned by the server; immutable after `prepare()`, so service threads share it freely.
"""
import ctypes
import os
import pathlib
import shutil
import signal
import socket
import subprocess
from typing import Dict, List, Optional, Sequence

SHELL_UID = 2000  # AID_SHELL
SHELL_GROUPS = "2000,3003,3009"  # shell, inet, readproc
# The emulated bionic takes bionic's name, so that /proc/PID/maps shows /system/lib64/libc.so as
# on a phone before Android 10 (what droidheap --all looks for).
LIBC_NAME = "libc.so"
CLIENT_NAME = "heapprofd_client.so"
# Each bitness's libraries, as on a phone: the emulated bionic and the platform's profiling client.
LIB_DIRS = {64: "system/lib64", 32: "system/lib"}
_PLATFORM_CLIENT_STAND_IN = "the platform's heapprofd_client.so (a stand-in: it does not load)\n"
# Every program gets its own bitness's emulated bionic, as on a phone: glibc's loader expands $LIB
# in LD_PRELOAD to its library directory, whose name differs between builds; each name it may take
# leads to the emulated bionic of that bitness.
_BIONIC_BY_LIB = "system/etc/droidheap-bionic"
_LIB_NAMES = {64: ("lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"),
              32: ("lib32", "lib/i386-linux-gnu", "lib/arm-linux-gnueabihf")}

# Host directories the device's programs need (the dynamic loader, libraries, /proc): bound in.
_HOST_DIRS = ("usr", "etc", "proc", "sys", "opt", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
_HOST_DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty", "ptmx")
_HOST_DEV_DIRS = ("pts", "shm")
# The device's own tree, as on a phone (and as in local.py's emulator device).
_DEVICE_DIRS = {"system/bin": 0o755, "system/lib64": 0o755, "system/xbin": 0o755,
                "system/etc": 0o755,
                "data": 0o771, "data/local": 0o751, "data/local/tmp": 0o771,
                "data/misc/perfetto-traces": 0o773, "dev/socket": 0o755, "sdcard": 0o770}
# Directories the shell user owns on a phone.
_SHELL_OWNED = ("data/local/tmp", "sdcard")
_TOOLS = pathlib.Path(__file__).resolve().parent / "bin"

# Runs in a new mount namespace as root, once: binds the host's directories into the device root
# ($1), makes /system read-only as on a phone, says so, and keeps the namespace alive until
# killed. Every command then enters it.
_HOLD_NAMESPACE = """set -e
r=$1
for d in $DH_BIND_DIRS; do mount --rbind "/$d" "$r/$d"; done
for n in $DH_BIND_DEV; do mount --bind "/dev/$n" "$r/dev/$n"; done
mount --bind "$r/system" "$r/system"
mount -o remount,bind,ro "$r/system"
echo ready
exec sleep infinity
"""
_PR_SET_PDEATHSIG = 1
# The host's tools that enter the device, found on the host's PATH (a device's PATH is its own).
_NSENTER = shutil.which("nsenter") or "/usr/bin/nsenter"
_CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"


def _die_with_parent() -> None:
    # The namespace's holder must not outlive this adbd, however it ends.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class DeviceRoot:
    def __init__(self, path: pathlib.Path, as_root: bool):
        self.path = path.absolute()
        self.as_root = as_root
        self._bind_dirs: List[str] = []
        self._host_names: List[str] = []  # top-level names that are the host's own (or links)
        self._namespace_holder: Optional[subprocess.Popen] = None

    def prepare(self, libcs: Dict[int, pathlib.Path], platform_heapprofd: bool) -> None:
        """Lays the root out. `libcs` (the emulation layer standing in for bionic, by bitness) are
        installed where every program run here gets them, as every program on a phone gets
        bionic; with `platform_heapprofd` the platform's heapprofd runs (its service state and
        socket), as on a userdebug phone where it was started."""
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
        for bits, libc in libcs.items():
            self._install_bionic(bits, libc)
        if platform_heapprofd:
            # Its socket, as init makes it; nothing answers on it here.
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as platform_socket:
                platform_socket.bind(str(self.path / "dev/socket/heapprofd"))
        sh = self.path / "system" / "bin" / "sh"
        if not sh.is_symlink():
            sh.symlink_to("/bin/sh")
        self._hold_namespace()

    def _install_bionic(self, bits: int, libc: pathlib.Path) -> None:
        lib_dir = self.path / LIB_DIRS[bits]
        lib_dir.mkdir(mode=0o755, exist_ok=True)
        shutil.copy2(libc, lib_dir / LIBC_NAME)
        # The platform's heap profiling client, which bionic loads on Android 10+: here a file
        # that does not load, so that a program profiled on this device proves it loaded ours
        # (on a read-only /system, mounted over it).
        (lib_dir / CLIENT_NAME).write_text(_PLATFORM_CLIENT_STAND_IN)
        for name in _LIB_NAMES[bits]:
            link = self.path / _BIONIC_BY_LIB / name / LIBC_NAME
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.is_symlink():
                link.symlink_to(f"/{LIB_DIRS[bits]}/{LIBC_NAME}")

    def _hold_namespace(self) -> None:
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
               "DH_BIND_DIRS": " ".join(self._bind_dirs), "DH_BIND_DEV": " ".join(_HOST_DEV_NODES)}
        self._start_holder(["unshare", "--mount", "--propagation", "private", "--", "/bin/sh",
                            "-c", _HOLD_NAMESPACE, "hold", str(self.path)], env)

    def _start_holder(self, argv: Sequence[str], env: Dict[str, str]) -> None:
        """Starts the process holding the device's namespaces, which prints "ready" once its
        mounts are made."""
        self._namespace_holder = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        line = self._namespace_holder.stdout.readline().decode(errors="replace").strip()
        if line != "ready":
            rest = self._namespace_holder.stdout.read(4096).decode(errors="replace").strip() \
                if self._namespace_holder.poll() is not None else ""
            self.close()
            raise OSError(f"cannot make the device's namespaces (root and `unshare` are needed): "
                          f"{' '.join(filter(None, [line, rest])) or 'no answer'}")

    def _enter(self) -> List[str]:
        """The command prefix that enters the device's namespaces (chroot follows)."""
        return [_NSENTER, f"--mount=/proc/{self._namespace_holder.pid}/ns/mnt", "--"]

    def close(self) -> None:
        if self._namespace_holder is not None and self._namespace_holder.poll() is None:
            self._namespace_holder.kill()
            self._namespace_holder.wait()

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
        return env

    def command(self, argv: Sequence[str], as_root: Optional[bool] = None) -> List[str]:
        """argv run as a device program (as root with --root or `as_root`, else as the shell
        user). The emulated bionic is preloaded from inside the chroot (by env, the first program
        there): the host's nsenter and chroot cannot load it from its device path."""
        root = self.as_root if as_root is None else as_root
        identity = [] if root else [f"--userspec={SHELL_UID}:{SHELL_UID}",
                                    f"--groups={SHELL_GROUPS}"]
        bionic = ["/usr/bin/env", f"LD_PRELOAD=/{_BIONIC_BY_LIB}/$LIB/{LIBC_NAME}"] \
            if (self.path / _BIONIC_BY_LIB).is_dir() else []
        return [*self._enter(), _CHROOT, *identity, str(self.path), *bionic, *argv]

    def popen(self, argv: Sequence[str], as_root: Optional[bool] = None,
              env: Optional[Dict[str, str]] = None, **kwargs) -> subprocess.Popen:
        # Its own process group, so a stream closed by the host can end the whole command.
        return subprocess.Popen(self.command(argv, as_root),
                                env={**self.environment(), **(env or {})},
                                start_new_session=True, **kwargs)
