"""Android 10's userland and bionic beside the project (../shared/android/README.md): whether they
are there, and test programs built for them as the NDK builds an app's native code, with Debian's
clang against bionic's headers (scripts/android_sysroot.sh makes the sysroot, in build/)."""
import pathlib
import subprocess
from typing import Sequence

from tests.requirements import require

ROOT = pathlib.Path(__file__).resolve().parents[1]
ANDROID = ROOT.parent / "shared" / "android"
ROOTFS = ANDROID / "android10-arm64-rootfs.tar.xz"
SYSROOT = ROOT / "build" / "android-sysroot"
API = 29
TARGETS = {"arm64-v8a": "aarch64-linux-android", "armeabi-v7a": "armv7a-linux-androideabi",
           "x86_64": "x86_64-linux-android", "x86": "i686-linux-android"}
# The NDK's own compiler and linker flags for an app's code (its CMake toolchain's defaults, as
# ndk_client/cmake/android-sysroot.cmake has them too), at -O2 with debug information.
NDK_FLAGS = ["-DANDROID", "-fdata-sections", "-ffunction-sections", "-funwind-tables",
             "-fstack-protector-strong", "-no-canonical-prefixes", "-D_FORTIFY_SOURCE=2",
             "-Wformat", "-Werror=format-security", "-fno-emulated-tls", "-O2", "-g"]
NDK_LINK_FLAGS = ["-fuse-ld=lld", "-Wl,--build-id=sha1", "-Wl,--gc-sections",
                  "-Wl,--no-undefined", "-Wl,--fatal-warnings"]


def require_android() -> None:
    require(None if ROOTFS.is_file() else f"no {ANDROID} (bionic's headers, Android 10's rootfs)")


def android_sysroot(abi: str) -> pathlib.Path:
    """build/android-sysroot, made for `abi` if it is not yet (reused otherwise)."""
    require_android()
    result = subprocess.run([str(ROOT / "scripts" / "android_sysroot.sh"), str(ANDROID),
                             str(SYSROOT), abi], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return SYSROOT


def compile_android_program(source: pathlib.Path, out: pathlib.Path, abi: str,
                            rosegment: bool = True,
                            include_dirs: Sequence[pathlib.Path] = ()) -> pathlib.Path:
    """tests/programs' `source` (C or C++) built for Android `abi` as an app's code is. Without
    `rosegment`, as the NDK links an app whose minSdkVersion is below 29 (--no-rosegment: code
    and read-only data in one segment, the layout unwinders before Android 10's expect). With
    `include_dirs` searched for headers (bench/programs' need droidheap/heaps.h)."""
    cxx = source.suffix == ".cc"
    compiler = "/usr/lib/llvm-14/bin/clang++" if cxx else "/usr/lib/llvm-14/bin/clang"
    flags = [f"--target={TARGETS[abi]}{API}", f"--sysroot={android_sysroot(abi)}", *NDK_FLAGS,
             *(f"-I{directory}" for directory in include_dirs)]
    if abi == "armeabi-v7a":
        flags.append("-mthumb")
    if cxx:  # the platform's libc++ (an app would ship its own libc++_shared.so)
        flags += ["-stdlib=libc++", "-fno-exceptions"]
    link_flags = [*NDK_LINK_FLAGS, *([] if rosegment else ["-Wl,--no-rosegment"])]
    result = subprocess.run([compiler, *flags, *link_flags, str(source), "-o", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return out
