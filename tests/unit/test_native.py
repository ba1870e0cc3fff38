"""Runs the native unit tests (ndk_client/tests/*_test.cc) that need no arguments, in the host's
build and in the 32-bit x86 build, and the tests that pair the two: one wire layout, and each
build's unwinder on the other ABI's process."""
import pathlib
import re
import shutil
import subprocess

import pytest

from tests.requirements import require

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Every native test, but the one that needs a helper process to unwind (run by the tests below).
NATIVE_TESTS = sorted(path.stem for path in (ROOT / "ndk_client" / "tests").glob("*_test.cc")
                      if path.stem != "cross_abi_unwind_test")
# Made early by the worker that takes this module (the -m32 build, which the root test device's
# x86 binaries come from), while the device tests' worker runs its others (tests/conftest.py).
MADE_EARLY = True

BUILDS = {"host": "native_build", "x86": "native_build_i386"}
REGISTER_CAPTURE = ROOT / "ndk_client" / "client" / "register_capture.cc"


def _run(*command: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=120)


# unwound_stack_cache_test expects the cache to keep each stack it captures, as glibc's x86_64
# frames allow. A stack through i386 glibc's or bionic's libc frames is not kept (a rule the cache
# does not follow leaves the unwind's inputs incomplete): there it fails, and is left out.
ONLY_ON_THE_HOST = {"unwound_stack_cache_test"}


@pytest.mark.parametrize("build, name", [(build, name) for name in NATIVE_TESTS for build in BUILDS
                                         if build == "host" or name not in ONLY_ON_THE_HOST])
def test_native_unit(request, build, name):
    build_dir = request.getfixturevalue(BUILDS[build])
    result = _run(build_dir / "tests" / name)
    assert result.returncode == 0, result.stdout + result.stderr


def test_wire_layout_is_the_same_in_32_and_64_bit_builds(native_build, native_build_i386):
    """A 32-bit app's client and a 64-bit daemon share these structs on a phone."""
    layouts = [_run(build / "tests" / "wire_layout_test") for build in (native_build,
                                                                         native_build_i386)]
    assert all(r.returncode == 0 for r in layouts), [r.stderr for r in layouts]
    assert "AllocRecord size=48 align=8" in layouts[0].stdout
    assert layouts[0].stdout == layouts[1].stdout


@pytest.mark.parametrize("unwinder, process", [("host", "x86"), ("x86", "host")])
def test_unwinder_unwinds_another_abis_process(request, unwinder, process):
    """As a 64-bit droidheapd unwinds a 32-bit app: stacks captured by the other build's helper,
    unwound from outside through its /proc files, equal libgcc's in-process unwind."""
    unwinder_dir = request.getfixturevalue(BUILDS[unwinder])
    helper_dir = request.getfixturevalue(BUILDS[process])
    result = _run(unwinder_dir / "tests" / "cross_abi_unwind_test",
                  helper_dir / "tests" / "unwind_capture_helper")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"3 (\S+) stacks unwound by (\S+): ok", result.stdout)


def test_armeabi_v7a_register_capture_assembles(tmp_path):
    """No NDK here: at least the armeabi-v7a capture assembles, storing r4-r11, sp and lr (twice:
    lr and pc), packed in that order (registers.h's captured registers), into the low halves of
    their 8-byte slots and zero into the high halves."""
    require("llvm-mc or llvm-objdump is not installed (Debian: apt-get install llvm)"
            if shutil.which("llvm-mc") is None or shutil.which("llvm-objdump") is None else None)
    source = REGISTER_CAPTURE.read_text()
    arm = source[source.index("#elif defined(__arm__)"):]
    body = arm.index('R"(') + len('R"(')  # the shared .text/.globl/.type directives come before
    assembly = arm[body:arm.index(')"', body)]
    (tmp_path / "capture.s").write_text(assembly)
    subprocess.run(["llvm-mc", "-triple=armv7a-linux-androideabi", "-filetype=obj",
                    str(tmp_path / "capture.s"), "-o", str(tmp_path / "capture.o")], check=True)
    listing = subprocess.run(["llvm-objdump", "-d", "--triple=armv7a", str(tmp_path / "capture.o")],
                             capture_output=True, text=True, check=True).stdout
    stores = [(register, int(offset or 0))
              for register, offset in re.findall(r"\bstr\s+(\w+), \[r0(?:, #(\d+))?\]", listing)]
    expected = []
    for slot, register in enumerate(["r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "sp", "lr",
                                     "lr"]):
        expected += [(register, slot * 8), ("r1", slot * 8 + 4)]
    assert stores == expected
    assert re.search(r"\bmov\s+r1, #0\b", listing) and re.search(r"\bbx\s+lr\b", listing)
