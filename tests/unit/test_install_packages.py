"""Every build route installs the Debian packages it uses (scripts/check_packages: the route run
under strace, each file it opened named by its package, compared with what the route named to
install_missing and with what a fresh Debian has), on the longest route this machine can take (from
../shared/android, else the bare one, no Android binaries), and the arm64-v8a emulator binaries of
scripts/install_test_tools. The NDK route needs an NDK, absent here. What the tests themselves use,
scripts/test checks in CI through the files' access times. In CI, .ci/run checks its own installs
as they run (DROIDHEAP_INSTALLS_CHECKED): the two route checks here, which would build them again,
then skip."""
import os
import pathlib
import shutil
import subprocess

import pytest

from tests.android import ROOT
from tests.requirements import require

# Minutes of work: started before the short modules, so that the run ends on short ones
# (tests/conftest.py, _start_order).
RUNS_LONG = True
CHECK = ROOT / "scripts" / "check_packages"


# Set by .ci/run, whose installs of this tree were checked as they ran.
CHECKED_BY_CI = pytest.mark.skipif(
    bool(os.environ.get("DROIDHEAP_INSTALLS_CHECKED")),
    reason="checked by .ci/run as it installed this clean clone (scripts/check_packages)")


def check(*command, options=(), env=None, timeout=1800) -> subprocess.CompletedProcess:
    require(None if shutil.which("strace") else "no strace (Debian package strace)")
    return subprocess.run([str(CHECK), *options, "--", *map(str, command)], capture_output=True,
                          text=True, env=env, timeout=timeout)


@CHECKED_BY_CI
def test_scripts_install_names_every_package_it_uses(tmp_path):
    """The longest route this machine takes: from ../shared/android where that is, else the one
    that builds no Android binaries, which is the other's first half (its packages too). One ABI
    of the route: each is built by the same tools (two minutes of the suite saved); the 32-bit
    ARM one, whose flags differ most from this machine's."""
    route = "shared" if (ROOT.parent / "shared" / "android").is_dir() else "none"
    # Fresh build trees: a route whose trees are up to date compiles nothing and opens nothing.
    result = check(ROOT / "scripts" / "install", "--venv", tmp_path / "venv",
                   "--build", tmp_path / "build", "--android", route, "--abis", "armeabi-v7a")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "system files of" in result.stderr
    if route == "shared":
        assert "building the Android binaries (armeabi-v7a)" in result.stdout + result.stderr


def test_scripts_install_refuses_what_is_not_an_android_abi():
    """Said before anything is installed."""
    result = subprocess.run([str(ROOT / "scripts" / "install"), "--abis", "arm64-v8a,mips"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--abis mips" in result.stderr, result.stderr


@CHECKED_BY_CI
def test_the_emulators_arm64_build_names_every_package_it_uses(tmp_path):
    result = check(ROOT / "scripts" / "build_arm64.sh", tmp_path / "bin", tmp_path / "build")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert (tmp_path / "bin" / "arm64-v8a" / "droidheapd").is_file()


def test_a_package_used_but_not_named_is_found(tmp_path):
    """xz (xz-utils, in no fresh Debian) used without being named: found, with the program;
    named through install_missing: accepted. tar, in every Debian, needs no naming."""
    archive = tmp_path / "a.tar.xz"
    subprocess.run(["tar", "-cJf", str(archive), "-C", str(ROOT), "README.md"], check=True)
    unpack = f"tar -xJf {archive} -C {tmp_path}"
    unnamed = check("bash", "-c", unpack)
    assert unnamed.returncode == 1, unnamed.stderr
    assert "  xz-utils: /usr/bin/xz (by xz)" in unnamed.stderr, unnamed.stderr
    assert "tar" not in unnamed.stderr.split("does not have:")[1], unnamed.stderr

    named = check("bash", "-c", f". {ROOT}/scripts/apt_packages.sh && install_missing xz-utils && "
                  + unpack)
    assert named.returncode == 0, named.stderr
    assert "1 named" in named.stderr, named.stderr


def test_a_package_named_but_not_installed_is_an_error_not_an_install(tmp_path):
    missing = "droidheap-no-such-package"
    result = check("bash", "-c", f". {ROOT}/scripts/apt_packages.sh && install_missing {missing}")
    assert result.returncode == 1, result.stderr
    assert f"Debian packages not installed: {missing}" in result.stderr, result.stderr
    assert "failed (exit 1)" in result.stderr, result.stderr


def test_an_installer_keeps_what_it_named_and_the_check_around_it_sees_it(tmp_path):
    """log_packages_to: the installer's own list (for scripts/test's check in CI), and at its exit
    the list of the check that runs it (.ci/run's)."""
    own = tmp_path / "own"
    result = check("bash", "-c", f". {ROOT}/scripts/apt_packages.sh && log_packages_to {own} && "
                   "install_missing xz-utils && xz --version")
    assert result.returncode == 0, result.stderr
    assert "1 named" in result.stderr, result.stderr
    assert own.read_text().split() == ["xz-utils"]


def test_installs_are_refused_during_a_check_unless_asked_for():
    said = "echo install=${DROIDHEAP_PACKAGES_INSTALL:-yes}"
    # As a user's shell has it (scripts/test refuses installs for the whole suite).
    env = {k: v for k, v in os.environ.items() if k != "DROIDHEAP_PACKAGES_INSTALL"}
    assert "install=no" in check("bash", "-c", said, env=env).stdout
    assert "install=yes" in check("bash", "-c", said, options=["--installs"], env=env).stdout
