"""What a phone owner without a compiler installs: the wheels scripts/build_wheel makes (their
contents: tests/unit/test_wheels.py), each installed with pip alone into a virtual environment of
its own (no source tree on its path, no $DROIDHEAP_BIN_DIR; tests/wheels.py), then profiling a
program on the Android 11 test device in root mode from another directory. The wheel for any host
OS (py3-none-any) has its phone session run here with what only Linux has taken away: fcntl,
termios, pty, resource and tty unimportable, this machine's /proc empty."""
import os
import pathlib
import subprocess

import pytest

from tests.android import compile_android_program
from tests.e2e.test_profile import assert_sites, single_process
from tests.e2e.trace_check import totals_by_leaf_function
from tests.unit.test_any_os import LINUX_ONLY_MODULES, WITHOUT_LINUX_MODULES
from tests.wheels import installed_wheel

from .conftest import DEVICE_PROGRAM, ROOT, serve_adb

# The wheels are tests/unit/test_wheels.py's (MADE_EARLY), built by the other worker meanwhile:
# this module comes last in its group (tests/conftest.py, _start_order), when they are made.
USES_MADE_EARLY = True

# Runs the rest of its command line with an empty tmpfs over /proc, in a mount namespace of its
# own: this machine's processes out of sight (the adb server, reached over TCP, is unaffected).
WITHOUT_PROC = ["unshare", "--mount", "--", "sh", "-c", 'mount -t tmpfs none /proc && exec "$@"',
                "sh"]


@pytest.fixture(scope="module")
def adb_server(tmp_path_factory):
    yield from serve_adb("adb36", tmp_path_factory, android=True)


@pytest.fixture(scope="module")
def alloc_sites(android_release, tmp_path_factory):
    return compile_android_program(ROOT / "tests" / "programs" / "alloc_sites.c",
                                   tmp_path_factory.mktemp("program") / "alloc_sites",
                                   android_release.abi)


def alone(env_dir: pathlib.Path, adb_server) -> dict:
    """The environment the programs of the virtual environment at `env_dir` run in: that
    environment's alone, with this test's adb server."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("ANDROID_SERIAL", "DROIDHEAP_BIN_DIR", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update(adb_server.env, PATH=f"{env_dir / 'bin'}{os.pathsep}/usr/bin:/bin")
    where = subprocess.run([str(env_dir / "bin" / "python"), "-c",
                            "import droidheap; print(droidheap.__file__)"], cwd=env_dir.parent,
                           env=env, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(str(env_dir)), where.stdout
    return env


@pytest.mark.parametrize("android_release", ["android11"], indirect=True)  # native: seconds
def test_a_wheel_alone_profiles_a_phone(adb_server, android_root_device, android_release,
                                        alloc_sites, tmp_path, tmp_path_factory):
    env_dir = installed_wheel("linux", tmp_path_factory).env_dir
    env = alone(env_dir, adb_server)
    adb_server.adb("-s", android_root_device.serial, "push", str(alloc_sites), DEVICE_PROGRAM)
    out = tmp_path / "out"
    result = subprocess.run([str(env_dir / "bin" / "droidheap"),
                             "-s", android_root_device.serial, "-o", str(out), "-i", "1", "--",
                             DEVICE_PROGRAM], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"{android_release.banner}, root mode" in result.stderr
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", alloc_sites)), 1)
    assert "site_leak_malloc (alloc_sites.c:" in result.stderr, result.stderr


@pytest.mark.parametrize("android_release", ["android11"], indirect=True)
def test_the_any_os_wheel_profiles_a_phone_without_what_only_linux_has(
        adb_server, android_root_device, android_release, alloc_sites, tmp_path,
        tmp_path_factory):
    env_dir = installed_wheel("any", tmp_path_factory).env_dir
    env = alone(env_dir, adb_server)
    without_modules = tmp_path / "without linux modules"
    without_modules.mkdir()
    (without_modules / "sitecustomize.py").write_text(WITHOUT_LINUX_MODULES)
    # droidheap's caches (symbols, an emulated device's root) in the test's own directory.
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache dir")
    bare_env = dict(env, PYTHONPATH=str(without_modules))
    work = tmp_path / "work dir"
    work.mkdir()

    def droidheap(*args, expected=0, linux=False):
        """droidheap's result, run without what only Linux has (but with `linux`)."""
        command = [str(env_dir / "bin" / "droidheap"), *args]
        result = subprocess.run(command if linux else [*WITHOUT_PROC, *command], cwd=work,
                                env=env if linux else bare_env, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == expected, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr, result.stderr
        return result

    # What droidheap's commands run in is what the test means it to be.
    absent = subprocess.run([*WITHOUT_PROC, str(env_dir / "bin" / "python"), "-c",
                             "import os; print(os.listdir('/proc')); import " +
                             ", ".join(LINUX_ONLY_MODULES)],
                            cwd=work, env=bare_env, capture_output=True, text=True, timeout=60)
    assert absent.stdout == "[]\n" and "taken away by the test" in absent.stderr, absent

    adb_server.adb("-s", android_root_device.serial, "push", str(alloc_sites), DEVICE_PROGRAM)
    out = work / "out one"
    profiled = droidheap("-s", android_root_device.serial, "-o", str(out), "-i", "1", "--",
                         DEVICE_PROGRAM)
    assert f"{android_release.banner}, root mode" in profiled.stderr
    assert "site_leak_malloc (alloc_sites.c:" in profiled.stderr, profiled.stderr
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", alloc_sites)), 1)

    assert "site_leak_malloc" in droidheap("report", str(out)).stdout
    again = work / "out again"
    droidheap("symbolize", str(out / "raw-trace"), "-o", str(again))
    assert (again / "report.html").is_file()
    assert "site_leak_malloc" in droidheap("diff", str(out)).stdout
    droidheap("diff", str(out), str(again))
    assert droidheap("check", str(out), "--max-growth", "1GiB").stdout.startswith("ok: ")
    failed = droidheap("check", str(out), "--max-growth", "1", "--site", "site_leak_malloc",
                       expected=1)
    assert failed.stdout.startswith("FAIL: site_leak_malloc"), failed.stdout

    # The emulated device is not in this wheel, even on Linux: one line says what has it.
    local = droidheap("--local", "--", "/bin/true", expected=1, linux=True)
    lines = local.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("droidheap: "), local.stderr
    assert "--local needs Linux and droidheap's Linux wheel or a source install" in lines[0]
