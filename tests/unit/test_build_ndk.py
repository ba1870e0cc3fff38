"""scripts/build_ndk.sh without an NDK: its arguments and one-line errors, and a whole run against a
stand-in NDK whose toolchain file sets ANDROID as the NDK's does but compiles with the host's g++,
so that the tree configures, builds and installs under ANDROID (no emulation layer)."""
import pathlib
import subprocess
from typing import Tuple

import pytest

# Minutes of work: started before the short modules, so that the run ends on short ones
# (tests/conftest.py, _start_order).
RUNS_LONG = True
ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build_ndk.sh"

# What the NDK's build/cmake/android.toolchain.cmake provides that ndk_client/ relies on: ANDROID,
# ANDROID_ABI (given by the script), ANDROID_PLATFORM_LEVEL. Records what the script passed. It
# compiles unoptimized, with line tables: what is checked is the route, whose code the other
# builds check (a third less CPU time: 59 -> 42 s).
FAKE_TOOLCHAIN = """\
set(ANDROID TRUE)
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O0 -DNDEBUG" CACHE STRING "")
set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O0 -DNDEBUG" CACHE STRING "")
set(DROIDHEAP_DEBUG_INFO lines CACHE STRING "")
string(REGEX REPLACE "^android-" "" ANDROID_PLATFORM_LEVEL "${ANDROID_PLATFORM}")
if(ANDROID_ABI)
  file(APPEND "${CMAKE_CURRENT_LIST_DIR}/calls.log"
       "${ANDROID_ABI} ${ANDROID_PLATFORM} ${ANDROID_STL} ${ANDROID_ARM_MODE}\\n")
endif()
"""


def make_fake_ndk(ndk: pathlib.Path) -> pathlib.Path:
    (ndk / "build" / "cmake").mkdir(parents=True)
    (ndk / "build" / "cmake" / "android.toolchain.cmake").write_text(FAKE_TOOLCHAIN)
    return ndk


@pytest.fixture
def fake_ndk(tmp_path) -> pathlib.Path:
    return make_fake_ndk(tmp_path / "ndk")


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
    make_fake_ndk(where / "ndk")
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


def find_ndk(tmp_path, **environ) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), **environ}
    return subprocess.run([str(ROOT / "scripts" / "find_ndk")], capture_output=True, text=True,
                          env=env, timeout=60)


def test_find_ndk_looks_where_android_tooling_puts_one(tmp_path):
    studio = tmp_path / "home" / "Android" / "Sdk" / "ndk"
    for version in ("25.2.9519653", "26.1.10909125", "9.0.1"):
        make_fake_ndk(studio / version)
    (studio / "27.0.1").mkdir()  # a download cut short: no toolchain file
    # Android Studio's SDK: its newest whole NDK, by version, not by name.
    found = find_ndk(tmp_path)
    assert found.returncode == 0, found.stderr
    assert found.stdout == f"{studio / '26.1.10909125'}\n"
    assert "the newest NDK of the SDK at" in found.stderr
    # The variables CI images set come first.
    chosen = make_fake_ndk(tmp_path / "ci")
    found = find_ndk(tmp_path, ANDROID_NDK_ROOT=str(chosen), ANDROID_HOME=str(tmp_path / "none"))
    assert (found.stdout.strip(), found.stderr.strip()) == (str(chosen),
                                                            "the NDK in $ANDROID_NDK_ROOT")


def test_find_ndk_says_where_it_looked_when_there_is_none(tmp_path):
    found = find_ndk(tmp_path, ANDROID_NDK_HOME=str(tmp_path / "missing"))
    assert found.returncode == 1 and found.stdout == ""
    assert found.stderr.count("\n") == 1 and "~/Android/Sdk" in found.stderr
