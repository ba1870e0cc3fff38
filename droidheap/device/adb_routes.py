"""How our client gets into a process on a phone: one Route per way in (issue 7's modes 1 and 2;
mode 3, the platform's own heapprofd, needs no client of ours).

root     bionic's own routes, as heapprofd uses them. bionic loads <lib>/heapprofd_client.so when
         heapprofd.enable(.<name>) is set at start, or on the profiling signal; that file becomes
         ours (a bind mount over the platform's, read-only /system; a copy where there is none), and
         our daemon answers on /dev/socket/heapprofd, where that client connects, with the
         platform's heapprofd stopped. On a 64-bit device /system/lib's 32-bit twin becomes ours
         too, for 32-bit app processes. Every change is journaled first (adb_journal.py). What
         root runs and mounts are its own copies, in the directory only root can write
         (adb_root_dir.py), never the files pushed to /data/local/tmp.
preload  no root: bionic will not load anything for us, so programs droidheap starts get
         libdroidheap_preload.so through LD_PRELOAD (`droidheap -- PROG`, `droidheap shell --
         PROG` for a later attach). It loads the heapprofd_client.so beside it, which connects to
         the droidheapd.socket beside it (ndk_client/preload/preload_routes.cc); the daemon runs as
         the shell user.

A Route is chosen once per AdbDevice and used from its thread.
"""
import pathlib
import shlex
from typing import List, Optional

from droidheap import native
from droidheap.device.adb_journal import PROFILER_DIR, Change
from droidheap.device.adb_root_dir import ROOT_DIR, Copy
from droidheap.device.adb_shell import LISTING_MAX_BYTES
from droidheap.device.names import START_PROPERTY, start_properties
from droidheap.errors import DroidheapError
from droidheap.program_allocator import ASAN_AFTER_PRELOAD

PRELOAD_LIBRARY = "libdroidheap_preload.so"
_PLATFORM_SOCKET = "/dev/socket/heapprofd"
_PLATFORM_CLIENT_DIRS = {True: "/system/lib64", False: "/system/lib"}  # by 64-bitness
_SYSTEM_LIB_LABEL = "u:object_r:system_lib_file:s0"
PROFILING_SIGNAL = 36  # bionic's BIONIC_SIGNAL_PROFILER, __SIGRTMIN + 4
# bionic's libc as /proc/PID/maps names it: /apex/com.android.runtime/lib64/bionic/libc.so on
# Android 10+, /system/lib64/libc.so before (and /system/lib for 32-bit processes; the bootstrap
# bionic of early processes under /system too). Only there: a device whose /proc shows processes
# outside its own root (the emulator test device, chrooted over this machine's /proc) would
# otherwise take any libc.so, such as one a qemu-user process maps from an Android userland
# elsewhere on the host. qemu-user catches every host signal, so the profiling signal (a host
# real-time signal it hands on as another) kills such a process, silently.
_BIONIC_LIBC_IN_MAPS = r" /(apex|system)/([^ ]*/)?libc\.so$"


def _check(result, what: str) -> None:
    if result.exit_code != 0:
        reason = (result.stderr.strip().splitlines() or result.stdout.strip().splitlines()
                  or [f"exit status {result.exit_code}"])[0]
        raise DroidheapError(f"{what}: {reason}")


def _file_mode(name: str) -> int:
    return 0o755 if name == native.DAEMON else 0o644


class Route:
    name = ""
    socket_path = ""
    daemon_dir = PROFILER_DIR  # where the droidheapd it starts is

    def __init__(self, device):
        self.device = device
        self._start_name = None

    def files(self):
        return [native.DAEMON, native.CLIENT]

    def install(self, binaries: pathlib.Path, binaries32: Optional[pathlib.Path]) -> None:
        """Pushes the files for the device's ABI from `binaries`; `binaries32` holds those for
        the 32-bit ABI a 64-bit device also runs (None: that ABI is not profiled)."""
        for name in self.files():
            self.device.push(binaries / name, f"{PROFILER_DIR}/{name}", mode=_file_mode(name))

    def enable_at_start(self, name: str) -> None:
        self._start_name = name

    def disable_at_start(self, name: str) -> None:
        self._start_name = None

    def program_assignments(self, start_name: Optional[str] = None) -> str:
        """Environment assignments (shell words) for programs droidheap starts on the device;
        `start_name`: the program's, profiled from its start."""
        return ""

    def check_attachable(self, pid: int) -> None:
        """Raises DroidheapError saying why the route cannot reach `pid`, a process found
        running a moment ago."""

    def profileable_pids(self) -> List[int]:
        """Every running process the profiling signal would start profiling (--all)."""
        raise DroidheapError(f"--all is not available in {self.name} mode")

    def enable_all_at_start(self) -> None:
        raise DroidheapError(f"{self.name} mode cannot profile every process from its start")

    def disable_all_at_start(self) -> None:
        ...

    def _pids_handling_the_signal(self, maps_pattern: str, privileged: bool) -> List[int]:
        """The processes that map a file matching `maps_pattern` (an extended regex on
        /proc/PID/maps lines) and catch the profiling signal, which would kill any other: a
        process of another libc, a static one (bionic's ignore it), a kernel thread. One shell
        command lists each candidate with its SigCgt mask, read here."""
        script = (f"for d in /proc/[0-9]*; do p=${{d#/proc/}}; [ \"$p\" = $$ ] && continue; "
                  f"grep -qE {shlex.quote(maps_pattern)} $d/maps 2>/dev/null && "
                  f"echo \"$p $(grep '^SigCgt:' $d/status 2>/dev/null)\"; done; true")
        if privileged:
            script = self.device.privileged_script(script)
        result = self.device.run_script(script, max_output=LISTING_MAX_BYTES)
        _check(result, "cannot list the device's processes")
        pids = []
        for line in result.stdout.splitlines():
            words = line.split()
            if len(words) == 3 and words[0].isdigit() and words[1] == "SigCgt:":
                try:
                    caught = int(words[2], 16)
                except ValueError:
                    continue
                if caught >> (PROFILING_SIGNAL - 1) & 1:
                    pids.append(int(words[0]))
        return sorted(pids)


# DROIDHEAP_PROFILE's value for every program that starts with the preload library
# (preload/preload_routes.cc), as heapprofd.enable=all is bionic's.
PRELOAD_EVERY_PROGRAM = "all"


class PreloadRoute(Route):
    name = "preload"
    socket_path = f"{PROFILER_DIR}/droidheapd.socket"

    def files(self):
        return [*super().files(), PRELOAD_LIBRARY]

    def program_assignments(self, start_name: Optional[str] = None) -> str:
        # In front of any LD_PRELOAD the user set (bionic splits the list on spaces and colons).
        words = [f'LD_PRELOAD="{PROFILER_DIR}/{PRELOAD_LIBRARY}${{LD_PRELOAD:+ $LD_PRELOAD}}"',
                 f'ASAN_OPTIONS="{ASAN_AFTER_PRELOAD}${{ASAN_OPTIONS:+:$ASAN_OPTIONS}}"']
        start_name = start_name or self._start_name
        if start_name:
            words.append(f"DROIDHEAP_PROFILE={shlex.quote(start_name)}")
        return " ".join(words)

    def profileable_pids(self) -> List[int]:
        """The shell user's processes started with the preload library (droidheap shell)."""
        return self._pids_handling_the_signal(f"/{PRELOAD_LIBRARY}$", privileged=False)

    def check_attachable(self, pid: int) -> None:
        found = self.device.run_script(f"test -d /proc/{int(pid)} || exit 2; "
                                       f"grep -q {PRELOAD_LIBRARY} /proc/{int(pid)}/maps").exit_code
        if found == 2:
            raise DroidheapError(f"no process with pid {pid} on {self.device.serial}")
        if found != 0:
            raise DroidheapError(
                f"pid {pid} was not started with droidheap's preload library, and without root "
                f"nothing else can load the profiler into it: start it with `droidheap shell -- "
                f"COMMAND` (or root the device, or use --mode platform for a profileable app)")


class RootRoute(Route):
    name = "root"
    socket_path = _PLATFORM_SOCKET
    daemon_dir = ROOT_DIR

    def __init__(self, device, disable_selinux: bool):
        super().__init__(device)
        self._disable_selinux = disable_selinux

    def install(self, binaries: pathlib.Path, binaries32: Optional[pathlib.Path]) -> None:
        super().install(binaries, binaries32)
        device = self.device
        copies = [Copy(binaries / name, f"{PROFILER_DIR}/{name}", name, _file_mode(name))
                  for name in self.files()]
        lib32 = f"lib32/{native.CLIENT}"
        if binaries32 is not None:
            # 32-bit app processes load the 32-bit twin, from /system/lib; one daemon serves both.
            device.push(binaries32 / native.CLIENT, f"{PROFILER_DIR}/{lib32}", mode=0o644)
            copies.append(Copy(binaries32 / native.CLIENT, f"{PROFILER_DIR}/{lib32}", lib32,
                               0o644))
        device.root_dir.make()
        copied = device.root_dir.install(copies)
        changes = []
        if self._disable_selinux and device.facts.selinux == "Enforcing":
            changes.append(Change("setenforce 0", "setenforce 1", "cannot set SELinux permissive"))
        saved = f"{_PLATFORM_SOCKET}.droidheap-saved"
        changes += [Change("stop heapprofd", "start heapprofd",
                           "cannot stop the platform's heapprofd",
                           only_if='[ "$(getprop init.svc.heapprofd)" = running ]'),
                    Change(f"mv {_PLATFORM_SOCKET} {saved}", f"mv {saved} {_PLATFORM_SOCKET}",
                           f"cannot move {_PLATFORM_SOCKET} aside",
                           only_if=f"[ -e {_PLATFORM_SOCKET} ]"),
                    *self._platform_client_changes(copied[native.CLIENT], device.is_64_bit)]
        if binaries32 is not None:
            changes += self._platform_client_changes(copied[lib32], is_64_bit=False)
        device.journal.make(changes)

    @staticmethod
    def _platform_client_changes(source: str, is_64_bit: bool) -> List[Change]:
        """What makes `source`, root's copy of a client, the one bionic loads: mounted over the
        platform's where there is one, copied in its place where there is none."""
        target = f"{_PLATFORM_CLIENT_DIRS[is_64_bit]}/{native.CLIENT}"
        source, quoted = shlex.quote(source), shlex.quote(target)
        label = f"chcon {_SYSTEM_LIB_LABEL} {source} 2>/dev/null;"  # droidheap's own file
        # Lazily: a process that loaded the client keeps it mapped after the session, and a
        # plain umount is then refused (EBUSY); its mapping outlives the mount either way.
        return [Change(f"{label} mount -o bind {source} {quoted}", f"umount -l {quoted}",
                       f"cannot mount droidheap's client over {target}",
                       only_if=f"[ -e {quoted} ]"),
                Change(f"{label} cp {source} {quoted} && chmod 644 {quoted}", f"rm -f {quoted}",
                       f"cannot install droidheap's client as {target}",
                       only_if=f"[ ! -e {quoted} ]")]

    def enable_at_start(self, name: str) -> None:
        self.device.journal.make([Change(f"setprop {key} 1", f"setprop {key} ''",
                                         f"cannot set {key}")
                                  for key in map(shlex.quote, start_properties(name))])
        super().enable_at_start(name)

    def disable_at_start(self, name: str) -> None:
        keys = list(map(shlex.quote, start_properties(name)))
        _check(self.device.run_privileged(" && ".join(f"setprop {key} ''" for key in keys)),
               f"cannot clear {' and '.join(keys)}")
        super().disable_at_start(name)

    def profileable_pids(self) -> List[int]:
        """Every process running on bionic's libc, as heapprofd's `all` signals them, but the
        platform's heapprofd, which the session stops rather than profiles."""
        platform = set(self.device.pidof("heapprofd"))
        return [pid for pid in self._pids_handling_the_signal(_BIONIC_LIBC_IN_MAPS, privileged=True)
                if pid not in platform]

    def enable_all_at_start(self) -> None:
        # bionic loads the client into every program that starts while it reads "all".
        self.device.journal.make([Change(f"setprop {START_PROPERTY} all",
                                         f"setprop {START_PROPERTY} ''",
                                         f"cannot set {START_PROPERTY}")])

    def disable_all_at_start(self) -> None:
        _check(self.device.run_privileged(f"setprop {START_PROPERTY} ''"),
               f"cannot clear {START_PROPERTY}")
