"""The wheels scripts/build_wheel makes, each built and installed alone into a virtual environment
of its own once per test run, by whichever pytest-xdist worker asks first: the wheels' own module
(tests/unit/test_wheels.py, taken early by the other worker) usually makes them while the device
tests' worker, which profiles a phone with them (tests/adb/test_bare_wheel.py), runs its others,
and that worker finds them made. Paths hold spaces, as a user's may."""
import os
import pathlib
import subprocess
import zipfile
from typing import NamedTuple

from tests.build_lock import build_lock

ROOT = pathlib.Path(__file__).resolve().parent.parent
ANDROID_ABIS = ("arm64-v8a", "armeabi-v7a", "x86_64")  # what ../shared/android builds


class InstalledWheel(NamedTuple):
    wheel: pathlib.Path
    env_dir: pathlib.Path  # a virtual environment holding it and what it depends on alone


def _this_runs_dir(tmp_path_factory) -> pathlib.Path:
    """A directory of this test run's that every worker shares (without pytest-xdist, the run's
    own temporary directory)."""
    basetemp = tmp_path_factory.getbasetemp()
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp


def installed_wheel(kind: str, tmp_path_factory) -> InstalledWheel:
    """The `kind` wheel (linux or any) of this run, built and installed at the first call."""
    made = _this_runs_dir(tmp_path_factory) / f"{kind} wheel"
    done = made / "installed"
    with build_lock(made):
        if not done.is_file():
            wheel = _build_wheel(made / "dist here", kind)
            env_dir = made / "env dir"
            _install_alone(wheel, env_dir)
            done.write_text(f"{wheel}\n")
        return InstalledWheel(pathlib.Path(done.read_text().strip()), made / "env dir")


def _build_wheel(out: pathlib.Path, kind: str) -> pathlib.Path:
    built = subprocess.run([str(ROOT / "scripts" / "build_wheel"), "--out", str(out), kind],
                           capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stderr
    return pathlib.Path(built.stdout.strip().splitlines()[-1])


def _install_alone(wheel: pathlib.Path, env_dir: pathlib.Path) -> None:
    """A fresh virtual environment at `env_dir` holding only the wheel and what it depends on
    (click, adbutils, protobuf, perfetto, pyelftools)."""
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(env_dir)], check=True, timeout=120)
    installed = subprocess.run([str(env_dir / "bin" / "pip"), "install", "-q", str(wheel)],
                               capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr


def assert_android_binaries(archive: zipfile.ZipFile) -> None:
    names = set(archive.namelist())
    for abi in ANDROID_ABIS:
        assert archive.read(f"droidheap/bin/{abi}/droidheapd").startswith(b"\x7fELF")
        assert archive.read(f"droidheap/bin/{abi}/heapprofd_client.so").startswith(b"\x7fELF")
        # The custom heaps' header, beside the client that reads what it writes.
        assert f"droidheap/bin/{abi}/include/droidheap/heaps.h" in names
