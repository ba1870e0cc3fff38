"""The Android userlands and bionic beside the project (../shared/android/README.md): Android 10
arm64 (run under qemu-user) and Android 11 x86_64 (run natively on an x86_64 machine); whether
they are there, and test programs built for them as the NDK builds an app's native code, with
Debian's clang against bionic's headers (scripts/android_sysroot.sh makes the sysroot, in
build/)."""
import dataclasses
import pathlib
import platform
import struct
import subprocess
import zipfile
from typing import Dict, Sequence

from tests.requirements import require

ROOT = pathlib.Path(__file__).resolve().parents[1]
ANDROID = ROOT.parent / "shared" / "android"
ROOTFS = ANDROID / "android10-arm64-rootfs.tar.xz"
SYSROOT = ROOT / "build" / "android-sysroot"


@dataclasses.dataclass(frozen=True)
class AndroidRelease:
    """One of the test devices' userlands, as droidheap's banner names the device."""
    name: str
    version: int  # Android's
    rootfs: pathlib.Path
    abi: str
    sdk: int
    model: str
    build_type: str
    machine: str  # platform.machine() of a host that runs it natively

    @property
    def native(self) -> bool:
        return platform.machine() == self.machine

    @property
    def banner(self) -> str:
        """What droidheap says of the device: '(A37, arm64-v8a, SDK 29, userdebug)'."""
        return f"({self.model}, {self.abi}, SDK {self.sdk}, {self.build_type})"

    def require(self) -> None:
        """Skips (fails in CI) where this device cannot run: no archive, or another machine's
        userland with no qemu route for it (binfmt.py registers arm64 and arm only)."""
        if not self.rootfs.is_file():
            require(f"no {self.rootfs} (../shared/android)")
        require(None if self.native or self.machine == "aarch64" else
                f"the {self.name} userland is {self.machine}'s; this machine is "
                f"{platform.machine()}")


ANDROID10 = AndroidRelease("android10", 10, ROOTFS, "arm64-v8a", 29, "A37", "userdebug",
                           "aarch64")
ANDROID11 = AndroidRelease("android11", 11, ANDROID / "android11-x86_64-rootfs.tar.xz", "x86_64",
                           30, "mainline", "eng", "x86_64")
RELEASES = {release.name: release for release in (ANDROID10, ANDROID11)}
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
                            include_dirs: Sequence[pathlib.Path] = (),
                            shared: bool = False, cflags: Sequence[str] = ()) -> pathlib.Path:
    """tests/programs' `source` (C or C++) built for Android `abi` as an app's code is. Without
    `rosegment`, as the NDK links an app whose minSdkVersion is below 29 (--no-rosegment: code
    and read-only data in one segment, the layout unwinders before Android 10's expect). With
    `include_dirs` searched for headers (bench/programs' need droidheap/heaps.h). `shared`: a
    shared library (an app's JNI library), its soname `out`'s name. `cflags`: more compiler
    flags (-fno-omit-frame-pointer, say)."""
    cxx = source.suffix == ".cc"
    compiler = "/usr/lib/llvm-14/bin/clang++" if cxx else "/usr/lib/llvm-14/bin/clang"
    flags = [f"--target={TARGETS[abi]}{API}", f"--sysroot={android_sysroot(abi)}", *NDK_FLAGS,
             *(f"-I{directory}" for directory in include_dirs), *cflags]
    if abi == "armeabi-v7a":
        flags.append("-mthumb")
    if cxx:  # the platform's libc++ (an app would ship its own libc++_shared.so)
        flags += ["-stdlib=libc++", "-fno-exceptions"]
    link_flags = [*NDK_LINK_FLAGS, *([] if rosegment else ["-Wl,--no-rosegment"]),
                  *(["-shared", "-fPIC", f"-Wl,-soname,{out.name}"] if shared else [])]
    result = subprocess.run([compiler, *flags, *link_flags, str(source), "-o", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def write_apk(path: pathlib.Path, entries: Dict[str, bytes], compressed: Sequence[str] = (),
              align: int = 4096) -> Dict[str, int]:
    """A zip as the Android Gradle plugin and `zipalign -p` leave an APK: each entry stored, its
    data at a multiple of `align` (padded with zipalign's alignment extra field, 0xd935), except
    those named in `compressed` (deflated, unaligned). Returns where each entry's data starts."""
    offsets = {}
    with zipfile.ZipFile(path, "w") as apk:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            if name in compressed:
                info.compress_type = zipfile.ZIP_DEFLATED
            else:
                info.compress_type = zipfile.ZIP_STORED
                unpadded = apk.fp.tell() + 30 + len(name.encode())
                padding = -unpadded % align
                if padding and padding < 6:
                    padding += align
                if padding:
                    info.extra = struct.pack("<HHH", 0xd935, padding - 4, align) + \
                        bytes(padding - 6)
            offsets[name] = apk.fp.tell() + 30 + len(name.encode()) + len(info.extra)
            apk.writestr(info, data)
    return offsets
