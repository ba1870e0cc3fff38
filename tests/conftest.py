"""Shared fixtures: the native tree built once per test session (with its unit tests)."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def native_build() -> pathlib.Path:
    """Configures and builds ndk_client/ with the native tests; returns the build directory."""
    build = ROOT / "build" / "native-tests"
    build.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["cmake", "-S", str(ROOT / "ndk_client"), "-B", str(build), "-DDROIDHEAP_BUILD_TESTS=ON",
         "-DCMAKE_BUILD_TYPE=RelWithDebInfo"],
        check=True, capture_output=True, text=True)
    subprocess.run(["cmake", "--build", str(build), "-j", str(os.cpu_count() or 2)],
                   check=True, capture_output=True, text=True)
    return build
