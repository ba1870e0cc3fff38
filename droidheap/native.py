"""Where the device-side binaries for an ABI are. Two builds exist per ABI, each in its own
directory of the package: Android's (bionic; scripts/build_ndk.sh), pushed to phones, in
droidheap/bin/<abi>/; and the Linux emulator's (glibc; `pip install` for the host's ABI,
scripts/build_arm64.sh for arm64 under qemu), in droidheap/bin/linux/<abi>/."""
import os
import pathlib
import platform
import site
import sysconfig

from droidheap.errors import DroidheapError

DAEMON = "droidheapd"
CLIENT = "heapprofd_client.so"
EMULATED_LIBC = "libdroidheap_libc.so"

ANDROID = "android"
LINUX = "linux"
# The Linux emulator's ABIs, and what builds each: the host's comes with droidheap's Linux wheel
# or a source install, arm64-v8a (under qemu-user) with a script after a source install. The wheel
# for any host OS has none.
LINUX_BUILD_COMMANDS = {"x86_64": "scripts/install", "arm64-v8a": "scripts/build_arm64.sh"}
EMULATOR_NEEDS = "--local needs Linux and droidheap's Linux wheel or a source install"


def _candidate_dirs(abi: str, target: str):
    relative = pathlib.PurePath(abi) if target == ANDROID else pathlib.PurePath(LINUX, abi)
    # DROIDHEAP_BIN_DIR: a directory laid out as droidheap/bin, looked at first.
    override = os.environ.get("DROIDHEAP_BIN_DIR")
    if override:
        yield pathlib.Path(override) / relative
    yield pathlib.Path(__file__).resolve().parent / "bin" / relative
    # An editable install leaves the package in the source tree but installs the binaries into
    # site-packages.
    for root in [sysconfig.get_paths()["platlib"], *site.getsitepackages()]:
        yield pathlib.Path(root) / "droidheap" / "bin" / relative


def binary_dir(abi: str, required=(DAEMON, CLIENT), target: str = ANDROID) -> pathlib.Path:
    """The directory holding `required` built for `abi` and `target` (ANDROID or LINUX)."""
    for directory in _candidate_dirs(abi, target):
        if all((directory / name).is_file() for name in required):
            return directory
    if target == LINUX:
        raise DroidheapError(f"no droidheap binaries for {abi} (the Linux emulator) in this "
                             f"install: {EMULATOR_NEEDS} ({build_command(abi, target)})")
    raise DroidheapError(f"no droidheap binaries for {abi} (Android) in this install: "
                         f"{ANDROID_BINARIES_HINT}")


def host_abi() -> str:
    """This machine's ABI, in Android's names: the Linux emulator's binaries are built for it."""
    machine = platform.machine()
    return {"x86_64": "x86_64", "AMD64": "x86_64", "aarch64": "arm64-v8a",
            "arm64": "arm64-v8a"}.get(machine, machine)


def installed_bin_dir() -> pathlib.Path:
    """The installed package's droidheap/bin, where scripts/build_arm64.sh and
    scripts/build_android.sh add binaries to what pip installed: beside the host's emulator
    binaries (site-packages, for an editable install too, whose package stays in the source tree),
    or the package's own directory when there are none yet."""
    try:
        return binary_dir(host_abi(), target=LINUX).parent.parent
    except DroidheapError:
        return pathlib.Path(__file__).resolve().parent / "bin"


# What a user without them can do: most have Android Studio's NDK, or none and want a wheel;
# platform mode needs none (README.md, "First profile on a phone").
ANDROID_BINARIES_HINT = ("install a droidheap wheel that carries them, or build them with an "
                         "Android NDK: scripts/install finds it ($ANDROID_NDK_HOME, "
                         "~/Android/Sdk/ndk); profileable apps need none (--mode platform)")


def build_command(abi: str, target: str = ANDROID) -> str:
    if target == LINUX:
        return LINUX_BUILD_COMMANDS[abi]
    return "an Android NDK: scripts/build_ndk.sh NDK_DIR, or scripts/install, which finds it"
