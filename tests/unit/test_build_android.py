"""Android binaries built without an NDK (scripts/build_android.sh): what each ABI's files are, what
they need at run time, that bionic's own linker runs droidheapd in Android 10's userland under
qemu-user, and that the native unit tests pass on bionic (Android 11's natively too). The builds
scripts/install put into the installed package are used (built here when absent); the x86 one is
built here (its build tree in build/ is reused)."""
import os
import pathlib
import shutil
import subprocess
import tarfile

import pytest

from droidheap import native
from droidheap.elf.headers import EM_386, EM_AARCH64, EM_ARM, EM_X86_64, read_headers
from tests.android import ANDROID11, ROOT, ROOTFS, android_sysroot, require_android
from tests.build_lock import build_lock
from tests.requirements import require
from tests.unit.test_native import NATIVE_TESTS, ONLY_ON_THE_HOST
# Minutes of work: started before the short modules, so that the run ends on short ones
# (tests/conftest.py, _start_order).
RUNS_LONG = True
PRELOAD = "libdroidheap_preload.so"
IN_APP = (native.CLIENT, PRELOAD)  # loaded into apps
# What every app's linker namespace sees of these (public.libraries.txt): never libc++.so.
APP_VISIBLE = {"libc.so", "libm.so", "libdl.so", "liblog.so"}
MACHINE = {"arm64-v8a": EM_AARCH64, "armeabi-v7a": EM_ARM, "x86_64": EM_X86_64, "x86": EM_386}
LINKER = {"arm64-v8a": "/system/bin/linker64", "armeabi-v7a": "/system/bin/linker",
          "x86_64": "/system/bin/linker64", "x86": "/system/bin/linker"}
# The rootfs's library directory of the same bitness (x86 builds link against stubs of these).
SYSTEM_LIB = {"arm64-v8a": "system/lib64", "armeabi-v7a": "system/lib",
              "x86_64": "system/lib64", "x86": "system/lib"}
# What scripts/install builds (x86_64 with Android 11's userland beside the project).
INSTALLED_ABIS = ("arm64-v8a", "armeabi-v7a", *(("x86_64",) if ANDROID11.rootfs.is_file() else ()))
ANDROID_TESTS = [name for name in NATIVE_TESTS if name not in ONLY_ON_THE_HOST]
QEMU = {"arm64-v8a": "qemu-aarch64", "armeabi-v7a": "qemu-arm"}  # the ABIs run under qemu
# The ABI whose Android userland runs natively here (Android 11's x86_64), when it does.
NATIVE_ANDROID_ABIS = ("x86_64",) if ANDROID11.native else ()


def build(abis, dest: pathlib.Path) -> None:
    result = subprocess.run([str(ROOT / "scripts" / "build_android.sh"), "--dest", str(dest),
                             *abis], capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """{ABI: directory of its Android binaries}, every ABI."""
    require_android()
    installed = native.installed_bin_dir()
    dirs = {abi: installed / abi for abi in INSTALLED_ABIS
            if all((installed / abi / name).is_file() for name in (native.DAEMON, *IN_APP))}
    dest = tmp_path_factory.mktemp("android-bin")
    missing = [abi for abi in MACHINE if abi not in dirs]
    build(missing, dest)
    return {**dirs, **{abi: dest / abi for abi in missing}}


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory) -> pathlib.Path:
    """Android 10's userland unpacked, its absolute links pointed into the copy so that qemu-user's
    -L prefix reaches them."""
    require_android()
    root = tmp_path_factory.mktemp("android-rootfs")
    with tarfile.open(ROOTFS) as archive:
        archive.extractall(root)
    # A phone has no /tmp, and this one would stand in the way: qemu-user looks an absolute path up
    # in the rootfs first, so a test's new directory under the host's /tmp would be made on the
    # host, but reached from "/tmp" component by component (TraceWriter opens no link on the way)
    # inside the rootfs, where it is not.
    (root / "tmp").rmdir()
    for link in [p for p in root.rglob("*") if p.is_symlink()]:
        target = os.readlink(link)
        if target.startswith("/"):
            link.unlink()
            link.symlink_to(str(root) + target)
    return root


@pytest.fixture(scope="module")
def rootfs11(tmp_path_factory) -> pathlib.Path:
    """Android 11's userland unpacked, as a chroot takes it (its links absolute within it)."""
    ANDROID11.require()
    root = tmp_path_factory.mktemp("android11-rootfs")
    os.chmod(root, 0o755)  # a phone's `/`; mktemp's 0700 would keep other users out of it all
    with tarfile.open(ANDROID11.rootfs) as archive:
        archive.extractall(root)
    return root


@pytest.fixture(scope="module", params=[*QEMU, *NATIVE_ANDROID_ABIS])
def native_tests(request) -> tuple:
    """(ABI, directory of its ANDROID_TESTS) built for Android, in the tree scripts/build_android.sh
    (run by scripts/install) builds that ABI's binaries in, build/android-<abi>, configured the
    same way: only the tests' own sources compile here (half the time in CI). The tree's next
    build for install configures them away again (scripts/build_tree.sh)."""
    abi = request.param
    sysroot = android_sysroot(abi)
    build_dir = ROOT / "build" / f"android-{abi}"
    commands = (
        ["cmake", "-S", ROOT / "ndk_client", "-B", build_dir, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
         f"-DCMAKE_TOOLCHAIN_FILE={ROOT / 'ndk_client' / 'cmake' / 'android-sysroot.cmake'}",
         f"-DANDROID_ABI={abi}", "-DANDROID_PLATFORM=android-29",
         f"-DDROIDHEAP_ANDROID_SYSROOT={sysroot}", "-DDROIDHEAP_BUILD_TESTS=ON"],
        ["cmake", "--build", build_dir, "-j", str(os.cpu_count() or 2), "--target",
         *ANDROID_TESTS])
    with build_lock(build_dir):  # scripts/build_wheel may be building in the tree (build_tree.sh)
        for command in commands:
            result = subprocess.run(list(map(str, command)), capture_output=True, text=True,
                                    timeout=1800)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return abi, build_dir / "tests"


def readelf(*args) -> str:
    return subprocess.run(["readelf", "-W", *map(str, args)], check=True, capture_output=True,
                          text=True).stdout


def needed(path: pathlib.Path) -> set:
    return {line.split("[", 1)[1].rstrip("]") for line in readelf("-d", path).splitlines()
            if "(NEEDED)" in line}


def undefined_symbols(path: pathlib.Path) -> list:
    """Undefined dynamic symbols as name[@version]."""
    symbols = []
    for line in readelf("--dyn-syms", path).splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[0].endswith(":") and fields[6] == "UND":
            symbols.append(fields[7].split(" ")[0])
    return symbols


@pytest.mark.parametrize("abi", MACHINE)
def test_code_loaded_into_apps_needs_only_what_every_app_sees(built, abi):
    for name in IN_APP:
        path = built[abi] / name
        assert needed(path) <= APP_VISIBLE, (name, needed(path))
        # No C++ runtime either: every reference is to a public version of bionic's libraries
        # (libc++.so's symbols carry none; LIBC_PRIVATE, LIBC_PLATFORM and LIBC_DEPRECATED are
        # not the NDK's).
        for symbol in undefined_symbols(path):
            _, _, version = symbol.partition("@")
            assert version.startswith("LIB") and not version.endswith(
                ("_PRIVATE", "_PLATFORM", "_DEPRECATED")), (name, symbol)


@pytest.mark.parametrize("abi", MACHINE)
def test_daemon_needs_only_libraries_android_has(built, rootfs, abi):
    system_lib = rootfs / SYSTEM_LIB[abi]
    libraries = needed(built[abi] / native.DAEMON)
    assert "libc.so" in libraries
    assert all((system_lib / name).exists() for name in libraries), libraries


@pytest.mark.parametrize("abi", MACHINE)
def test_files_are_for_the_abi_and_bionics_linker(built, abi):
    for name in (native.DAEMON, *IN_APP):
        data = (built[abi] / name).read_bytes()
        assert read_headers(data).machine == MACHINE[abi], name
        assert data[4] == (2 if abi in ("arm64-v8a", "x86_64") else 1), name  # ELFCLASS64/32
    assert f"[Requesting program interpreter: {LINKER[abi]}]" in readelf(
        "-l", built[abi] / native.DAEMON)


@pytest.mark.parametrize("abi", QEMU)
def test_bionics_linker_runs_the_daemon_with_the_platforms_libcxx(built, rootfs, abi):
    """qemu-user with the rootfs as its prefix: the daemon's interpreter is Android 10's linker,
    which loads /system/lib{64}/libc++.so and libc.so from the rootfs, resolving every symbol
    before main runs (bionic binds immediately)."""
    qemu = QEMU[abi]
    require(None if shutil.which(qemu) else f"no {qemu} (Debian package qemu-user)")
    program = rootfs / "data" / "local" / "tmp" / native.DAEMON
    shutil.copy(built[abi] / native.DAEMON, program)
    result = subprocess.run([qemu, "-L", str(rootfs), str(program), "--help"],
                            capture_output=True, text=True, timeout=120)
    assert "usage: droidheapd --socket PATH" in result.stdout + result.stderr, result
    assert "CANNOT LINK EXECUTABLE" not in result.stderr


# Runs $2... in the Android userland at $1 as a phone's shell would: its own /dev and /proc (bionic
# crashes at start without /dev/null), the userland as `/`.
_IN_ANDROID_ROOT = """set -e
r=$1; shift
mount --bind /dev "$r/dev"
mount -t proc proc "$r/proc"
exec chroot "$r" "$@"
"""


def test_native_unit_tests_pass_on_bionic(native_tests, request):
    """Every native unit test, run by Android's linker against its libc, libm and libc++, from
    /data/local/tmp/<abi>: Android 10's under qemu-user for arm64-v8a and armeabi-v7a, Android
    11's natively for x86_64. Cases in them skip themselves, saying so: dwarf_cfi_own_binary_test
    on armeabi-v7a (its code is described by .ARM.exidx, which arm_exidx_test covers),
    dwarf_unwinder_test's reads of /proc/self/mem where qemu-user maps the guest elsewhere
    (armeabi-v7a), and under qemu-user only, process_identity_test's raw clone() child (bionic's cached getpid() survives
    it, and qemu-user ignores the MADV_WIPEONFORK that tells it apart on a phone's kernel): run
    natively, it is not skipped."""
    abi, tests_dir = native_tests
    if abi in QEMU:
        root = request.getfixturevalue("rootfs")
        qemu = QEMU[abi]
        require(None if shutil.which(qemu) else f"no {qemu} (Debian package qemu-user)")
        run = [qemu, "-L", str(root)]
    else:
        root = request.getfixturevalue("rootfs11")
        run = ["unshare", "--mount", "--pid", "--fork", "--", "sh", "-c", _IN_ANDROID_ROOT,
               "in-android", str(root)]
    directory = root / "data" / "local" / "tmp" / abi
    directory.mkdir(exist_ok=True)
    failed, outputs = {}, {}
    for name in ANDROID_TESTS:
        program = directory / name
        shutil.copy(tests_dir / name, program)
        device_path = program if abi in QEMU else f"/data/local/tmp/{abi}/{name}"
        result = subprocess.run([*run, str(device_path)], capture_output=True, text=True,
                                timeout=120)
        outputs[name] = result.stdout + result.stderr
        if result.returncode != 0:
            # A test killed by a signal prints nothing of what its pipe buffered: say how it ended.
            failed[name] = f"exit status {result.returncode}: {outputs[name][-2000:]}"
    assert not failed, failed
    if abi not in QEMU:  # a real kernel: nothing skipped for qemu's sake
        assert "raw clone() case skipped" not in outputs["process_identity_test"]
