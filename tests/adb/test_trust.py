"""What root does on a rooted device is droidheap's alone (issue 29): the shell user, who owns
/data/local/tmp, can neither plant a command in what root undoes nor swap what root runs or
mounts, and a name given on the command line never reaches a root shell as code.

Each attack here leaves a marker only root could create (in /data/local, root's 0751, or in `/`):
the marker must never appear."""
import subprocess
import time

import pytest

from .conftest import DEVICE_PROGRAM, ONE_ADB_SERVER, PROFILER_DIR, ROOT_DIR, AdbCli

pytestmark = ONE_ADB_SERVER  # what root runs on the device, whichever server carries it

_SHELL_UID = 2000  # tests/adbd/device_root.py's SHELL_UID


def as_shell(cli: AdbCli, script: str) -> str:
    """`script` run by the shell user on the rooted test device (whose adb shell is root's)."""
    quoted = script.replace("'", "'\\''")
    return cli.shell(f"setpriv --reuid={_SHELL_UID} --regid={_SHELL_UID} --clear-groups "
                     f"sh -c '{quoted}'")


def assert_one_line_error(result, expected: str) -> None:
    """Failed, with the reason in one line, the last (notes about the device come before it)."""
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("droidheap: ") and expected in lines[-1], result.stderr
    assert not [line for line in lines
                if "warning" in line and "32-bit processes are not profiled" not in line], lines


@pytest.fixture
def rooted(adb_server, root_device, local_program):
    """The rooted device, its staging directory owned by the shell user as a preload session
    leaves it, and no marker."""
    cli = AdbCli(adb_server, root_device.serial)
    cli.shell(f"rm -rf {PROFILER_DIR} {ROOT_DIR} /data/local/pwned* /pwned*")
    as_shell(cli, f"mkdir -p {PROFILER_DIR}/traces")
    adb_server.adb("-s", cli.serial, "push", str(local_program), DEVICE_PROGRAM)
    yield cli
    cli.shell(f"rm -rf {PROFILER_DIR} /data/local/pwned* /pwned*")


def markers(cli: AdbCli) -> str:
    return cli.shell("ls -d /data/local/pwned* /pwned* 2>/dev/null").strip()


def test_an_undo_line_the_shell_user_planted_is_never_run_as_root(rooted, tmp_path):
    cli = rooted
    # A lock that looks abandoned makes the next run repair the device from the journal.
    as_shell(cli, f"echo 'elsewhere 1 1' > {PROFILER_DIR}/session.lock; "
                  f"printf 'root touch /data/local/pwned-root\\n"
                  f"shell touch /data/local/pwned-shell\\n' > {PROFILER_DIR}/undo")
    result = cli.run("--mode", "root", "-o", tmp_path / "out", "--", DEVICE_PROGRAM)
    assert result.returncode == 0, result.stderr
    assert markers(cli) == ""
    assert "not run" in result.stderr, result.stderr
    cli.assert_left_as_it_was()


def test_root_runs_its_own_copy_of_droidheapd_not_the_shell_users(rooted, tmp_path):
    cli = rooted
    as_shell(cli, "printf '#!/system/bin/sh\\ntouch /data/local/pwned-swap\\n' "
                  "> /data/local/tmp/evil; chmod 755 /data/local/tmp/evil")
    # The shell user swaps whatever droidheap pushes for its own program, as fast as it can.
    swapper = subprocess.Popen(
        [str(cli.adb_server.binary), "-s", cli.serial, "shell",
         f"setpriv --reuid={_SHELL_UID} --regid={_SHELL_UID} --clear-groups sh -c "
         f"'echo $$ > /data/local/tmp/swapper.pid; cd {PROFILER_DIR}; while :; do "
         f"cp /data/local/tmp/evil .s 2>/dev/null && mv -f .s droidheapd 2>/dev/null; done'"],
        env=cli.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        result = cli.run("--mode", "root", "-o", tmp_path / "out", "--", DEVICE_PROGRAM)
    finally:
        cli.shell("kill $(cat /data/local/tmp/swapper.pid); rm -f /data/local/tmp/swapper.pid "
                  "/data/local/tmp/evil")
        swapper.kill()
        swapper.wait()
    assert markers(cli) == ""
    if result.returncode != 0:  # the swap came between push and root's copy: refused
        assert "Traceback" not in result.stderr
        assert "is not the droidheapd droidheap pushed there" in result.stderr, result.stderr
    cli.assert_left_as_it_was()


@pytest.mark.parametrize("made", ["a symlink", "owned by the shell user", "writable by others"])
def test_a_root_directory_root_did_not_make_is_refused(rooted, tmp_path, made):
    cli = rooted
    cli.shell({"a symlink": f"ln -s {PROFILER_DIR} {ROOT_DIR}",
               "owned by the shell user": f"mkdir {ROOT_DIR}; chown {_SHELL_UID} {ROOT_DIR}",
               "writable by others": f"mkdir -m 777 {ROOT_DIR}"}[made])
    try:
        result = cli.run("--mode", "root", "-o", tmp_path / "out", "--", DEVICE_PROGRAM)
        assert_one_line_error(result, f"{ROOT_DIR} on {cli.serial} is not a directory only "
                                      "root can write")
        assert cli.shell(f"ls {PROFILER_DIR}").split().count("session.lock") == 0
    finally:
        cli.shell(f"rm -rf {ROOT_DIR}")
    cli.assert_left_as_it_was()


@pytest.mark.parametrize("target", ["name", "program"])
def test_a_name_with_shell_syntax_is_refused_and_runs_nothing(rooted, tmp_path, target):
    cli = rooted
    if target == "name":
        name = "x;touch /data/local/pwned-name"
        args = ["-n", name, "-d", "500"]
    else:
        name = "p;touch pwned-program"  # a basename: no '/' (the shell's cwd is `/`)
        program = f"/data/local/tmp/{name}"
        cli.shell(f"cp {DEVICE_PROGRAM} '{program}'")
        args = ["--", program]
    result = cli.run("--mode", "root", "-o", tmp_path / "out", *args)
    assert_one_line_error(result, repr(name))
    assert markers(cli) == ""
    cli.assert_left_as_it_was()
