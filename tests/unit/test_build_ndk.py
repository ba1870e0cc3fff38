"""scripts/build_ndk.sh without an NDK: its arguments and one-line errors, and a whole run against a
stand-in NDK whose toolchain file sets ANDROID as the NDK's does but compiles with the host's g++,
so that the tree configures, builds and installs under ANDROID (no emulation layer)."""
import pathlib
import platform
import shutil
import subprocess
import sys
import zipfile
from typing import Tuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build_ndk.sh"

# What the NDK's build/cmake/android.toolchain.cmake provides that ndk_client/ relies on: ANDROID,
# ANDROID_ABI (given by the script), ANDROID_PLATFORM_LEVEL. Records what the script passed.
FAKE_TOOLCHAIN = """\
set(ANDROID TRUE)
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
string(REGEX REPLACE "^android-" "" ANDROID_PLATFORM_LEVEL "${ANDROID_PLATFORM}")
if(ANDROID_ABI)
  file(APPEND "${CMAKE_CURRENT_LIST_DIR}/calls.log"
       "${ANDROID_ABI} ${ANDROID_PLATFORM} ${ANDROID_STL} ${ANDROID_ARM_MODE}\\n")
endif()
"""


def make_fake_ndk(directory: pathlib.Path) -> pathlib.Path:
    ndk = directory / "ndk"
    (ndk / "build" / "cmake").mkdir(parents=True)
    (ndk / "build" / "cmake" / "android.toolchain.cmake").write_text(FAKE_TOOLCHAIN)
    return ndk


@pytest.fixture
def fake_ndk(tmp_path) -> pathlib.Path:
    return make_fake_ndk(tmp_path)


def run(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=900)


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr


def test_without_arguments_prints_usage():
    result = run()
    assert result.returncode == 2
    assert "usage: scripts/build_ndk.sh [--dest DEST] [--build BUILD] NDK_DIR [ABI...]" in \
        one_line_error(result)


def test_rejects_a_missing_ndk_directory(tmp_path):
    assert "no NDK at" in one_line_error(run(tmp_path / "nowhere"))


def test_rejects_an_ndk_without_its_toolchain_file(tmp_path):
    error = one_line_error(run(tmp_path))
    assert "build/cmake/android.toolchain.cmake is missing" in error


def test_rejects_an_unknown_abi(fake_ndk, tmp_path):
    error = one_line_error(run("--dest", tmp_path / "bin", fake_ndk, "x86_64", "mips"))
    assert "unknown ABI mips" in error
    assert not (tmp_path / "bin").exists()  # checked before anything is built


def test_refuses_to_configure_below_api_29(fake_ndk, tmp_path):
    result = subprocess.run(
        ["cmake", "-S", str(ROOT / "ndk_client"), "-B", str(tmp_path / "build"),
         f"-DCMAKE_TOOLCHAIN_FILE={fake_ndk / 'build/cmake/android.toolchain.cmake'}",
         "-DANDROID_ABI=x86_64", "-DANDROID_PLATFORM=android-26"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "droidheap needs 29 or" in result.stderr


@pytest.fixture(scope="module")
def ndk_build(tmp_path_factory) -> Tuple[pathlib.Path, subprocess.CompletedProcess]:
    """(the directory it ran in, the result of) one build of x86_64 with the stand-in NDK, started
    in that directory with relative paths, over a build tree a build with another NDK left there.
    One build for the three tests below: each takes a minute of CI."""
    where = tmp_path_factory.mktemp("ndk-build")
    make_fake_ndk(where)
    stale_tree = where / "trees" / "ndk-x86_64"
    stale_tree.mkdir(parents=True)
    (stale_tree / "CMakeCache.txt").write_text("CMAKE_TOOLCHAIN_FILE:FILEPATH=/old/ndk/toolchain\n")
    (stale_tree / "stale").write_text("")
    result = run("--dest", "out", "--build", "trees", "ndk", "x86_64", cwd=where)
    assert result.returncode == 0, result.stdout + result.stderr
    return where, result


def test_builds_and_installs_every_target_under_android(ndk_build):
    where, result = ndk_build
    dest = where / "out"
    assert f"x86_64: {dest}/x86_64" in result.stdout
    # Every installed target, the daemon and the client among them; the emulation layer (Linux
    # only) is left out under ANDROID.
    installed = {p.name for p in (dest / "x86_64").iterdir()}
    assert {"droidheapd", "heapprofd_client.so"} <= installed
    assert "libdroidheap_libc.so" not in installed
    calls = (where / "ndk" / "build" / "cmake" / "calls.log").read_text().splitlines()
    assert "x86_64 android-29 c++_static thumb" in calls


def test_paths_are_relative_to_where_it_was_started(ndk_build):
    where, _ = ndk_build
    assert (where / "out" / "x86_64" / "droidheapd").is_file()
    assert (where / "trees" / "ndk-x86_64").is_dir()


def test_starts_afresh_a_build_tree_configured_with_another_ndk(ndk_build):
    where, _ = ndk_build
    assert not (where / "trees" / "ndk-x86_64" / "stale").exists()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="checks an x86_64 host's wheel")
def test_a_wheel_ships_the_binaries_in_droidheap_bin_as_package_data(tmp_path):
    """What a release relies on (docs/development.md, "A release"): binaries left in
    droidheap/bin/<abi>/ go into the wheel although git ignores them, beside CMake's own Linux
    build in droidheap/bin/linux/."""
    tree = tmp_path / "tree"
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    for name in files:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tree / name)
    for abi in ("armeabi-v7a", "x86_64"):
        (tree / "droidheap" / "bin" / abi).mkdir(parents=True)
        (tree / "droidheap" / "bin" / abi / "droidheapd").write_text(f"NDK {abi}\n")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                    str(tmp_path / "wheel"), str(tree)], check=True, capture_output=True,
                   timeout=900)
    (wheel,) = (tmp_path / "wheel").glob("droidheap-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("droidheap/bin/armeabi-v7a/droidheapd") == b"NDK armeabi-v7a\n"
        assert archive.read("droidheap/bin/x86_64/droidheapd") == b"NDK x86_64\n"
        assert archive.read("droidheap/bin/linux/x86_64/droidheapd").startswith(b"\x7fELF")
        # The custom heaps' header, beside the client that reads what it writes.
        assert b"droidheap_register_heap" in archive.read(
            "droidheap/bin/linux/x86_64/include/droidheap/heaps.h")
