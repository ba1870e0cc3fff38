"""Where the device-side binaries for an ABI are: built by `pip install` for the host's ABI, by
scripts/build_arm64.sh (cross + qemu) and scripts/build_ndk.sh (Android) for the others."""
import os
import pathlib
import site
import sysconfig

from droidheap.errors import DroidheapError

DAEMON = "droidheapd"
CLIENT = "heapprofd_client.so"
EMULATED_LIBC = "libdroidheap_libc.so"

BUILD_COMMANDS = {
    "arm64-v8a": "scripts/build_arm64.sh (Linux emulator) or scripts/build_ndk.sh NDK_PATH",
    "x86_64": "pip install . (Linux emulator) or scripts/build_ndk.sh NDK_PATH",
}


def _candidate_dirs(abi: str):
    override = os.environ.get("DROIDHEAP_BIN_DIR")
    if override:
        yield pathlib.Path(override) / abi
    yield pathlib.Path(__file__).resolve().parent / "bin" / abi
    # An editable install leaves the package in the source tree but installs the binaries into
    # site-packages.
    for root in [sysconfig.get_paths()["platlib"], *site.getsitepackages()]:
        yield pathlib.Path(root) / "droidheap" / "bin" / abi


def binary_dir(abi: str, required=(DAEMON, CLIENT)) -> pathlib.Path:
    for directory in _candidate_dirs(abi):
        if all((directory / name).is_file() for name in required):
            return directory
    raise DroidheapError(
        f"no droidheap binaries for {abi}: build them with "
        f"{BUILD_COMMANDS.get(abi, 'scripts/build_ndk.sh NDK_PATH')}")
