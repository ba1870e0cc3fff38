"""What a phone owner without a compiler installs: the wheel scripts/build_wheel makes, carrying
the Android binaries of every ABI built here beside the Linux emulator's, installed with pip alone
into a virtual environment of its own (no source tree on its path, no $DROIDHEAP_BIN_DIR), then
profiling a program on the Android 11 test device in root mode from another directory."""
import os
import pathlib
import subprocess
import zipfile

import pytest

from tests.android import compile_android_program
from tests.e2e.test_profile import assert_sites, single_process
from tests.e2e.trace_check import totals_by_leaf_function

from .conftest import DEVICE_PROGRAM, ROOT, serve_adb

ANDROID_ABIS = ("arm64-v8a", "armeabi-v7a", "x86_64")  # what ../shared/android builds


@pytest.fixture(scope="module")
def adb_server(tmp_path_factory):
    yield from serve_adb("adb36", tmp_path_factory, android=True)


@pytest.mark.parametrize("android_release", ["android11"], indirect=True)  # native: seconds
def test_a_wheel_alone_profiles_a_phone(adb_server, android_root_device, android_release,
                                        tmp_path):
    built = subprocess.run([str(ROOT / "scripts" / "build_wheel"), "--out", str(tmp_path / "dist")],
                           capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stderr
    wheel = pathlib.Path(built.stdout.strip().splitlines()[-1])
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for abi in ANDROID_ABIS:
            assert archive.read(f"droidheap/bin/{abi}/droidheapd").startswith(b"\x7fELF")
            # The custom heaps' header, beside the client that reads what it writes.
            assert f"droidheap/bin/{abi}/include/droidheap/heaps.h" in names
        assert archive.read("droidheap/bin/linux/x86_64/droidheapd").startswith(b"\x7fELF")

    env_dir = tmp_path / "env"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(env_dir)], check=True, timeout=120)
    # Only the wheel and what it depends on (click, adbutils, protobuf, perfetto, pyelftools).
    installed = subprocess.run([str(env_dir / "bin" / "pip"), "install", "-q", str(wheel)],
                               capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr
    env = {key: value for key, value in os.environ.items()
           if key not in ("ANDROID_SERIAL", "DROIDHEAP_BIN_DIR", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update(adb_server.env, PATH=f"{env_dir / 'bin'}{os.pathsep}/usr/bin:/bin")
    where = subprocess.run([str(env_dir / "bin" / "python"), "-c",
                            "import droidheap; print(droidheap.__file__)"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(str(env_dir)), where.stdout

    program = compile_android_program(ROOT / "tests" / "programs" / "alloc_sites.c",
                                      tmp_path / "alloc_sites", android_release.abi)
    adb_server.adb("-s", android_root_device.serial, "push", str(program), DEVICE_PROGRAM)
    out = tmp_path / "out"
    result = subprocess.run([str(env_dir / "bin" / "droidheap"), "-s", android_root_device.serial,
                             "-o", str(out), "-i", "1", "--", DEVICE_PROGRAM], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"{android_release.banner}, root mode" in result.stderr
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", program)), 1)
    assert "site_leak_malloc (alloc_sites.c:" in result.stdout, result.stdout
