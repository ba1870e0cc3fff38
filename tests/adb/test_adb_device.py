"""AdbDevice through a real adb server (both adb binaries) and the test adbd: file transfer,
shell exit codes, properties, processes, root and non-root devices."""
import os
import pathlib
import shutil
import time

import pytest

from droidheap.device.adb import AdbDevice
from droidheap.errors import DroidheapError

from .conftest import start_test_adbd


@pytest.fixture
def device(adb_env, shell_device):
    return AdbDevice(serial=shell_device.serial)


@pytest.mark.parametrize("size", [0, 4097, 5 * 1024 * 1024])
def test_push_pull_round_trip_keeps_bytes(device, tmp_path, size):
    source = tmp_path / "source"
    source.write_bytes(os.urandom(size))
    remote = f"/data/local/tmp/round-trip-{size}"
    device.push(source, remote, mode=0o644)
    assert device.run(["stat", "-c", "%s %a", remote]).stdout.split() == [str(size), "644"]
    copy = tmp_path / "copy"
    device.pull(remote, copy)
    assert copy.read_bytes() == source.read_bytes()
    device.remove(remote)
    assert device.run(["test", "-e", remote]).exit_code == 1


def test_pull_of_missing_file_fails_without_leaving_a_file(device, tmp_path):
    with pytest.raises(DroidheapError, match="cannot pull /data/local/tmp/missing: .*No such file"):
        device.pull("/data/local/tmp/missing", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_shell_user_cannot_push_to_system(device, tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(DroidheapError, match="cannot push to /system/bin/f: .*Read-only file system"):
        device.push(tmp_path / "f", "/system/bin/f")


def test_shell_reports_exit_code_stdout_and_stderr(device):
    result = device.run(["sh", "-c", "echo out; echo err >&2; exit 42"])
    assert (result.exit_code, result.stdout, result.stderr) == (42, "out\n", "err\n")
    assert device.run(["false"]).exit_code == 1
    assert device.run(["sh", "-c", "kill -9 $$"]).exit_code == 137


def test_a_command_that_outlives_its_timeout_is_one_error(device):
    with pytest.raises(DroidheapError, match="did not answer in time"):
        device.run(["sleep", "10"], timeout_s=0.5)


def test_output_past_what_a_command_can_print_ends_it(device):
    """A command that prints a line or a few (an id, a property) may print 1 MiB at most."""
    with pytest.raises(DroidheapError, match=r"\(head -c 8388608 /dev/zero\): the device sent "
                                             r"more than the 1048576 bytes this command can "
                                             r"print$"):
        device.run(["head", "-c", "8388608", "/dev/zero"])
    assert device.run(["echo", "still here"]).stdout == "still here\n"


def test_a_command_that_trickles_output_ends_at_its_deadline(device):
    """The deadline is the whole command's: output every tenth of a second keeps no read
    waiting long, and still the command ends at its timeout."""
    started = time.monotonic()
    with pytest.raises(DroidheapError, match=r"did not answer in time \(the command took more "
                                             r"than 0.8 s\)"):
        device.run_script("for i in $(seq 30); do echo $i; sleep 0.1; done", timeout_s=0.8)
    assert time.monotonic() - started < 2.0


def test_host_files_seen_through_the_device_are_the_same(device, tmp_path):
    device.pull("/bin/sh", tmp_path / "sh")
    assert (tmp_path / "sh").read_bytes() == pathlib.Path("/bin/sh").resolve().read_bytes()
    assert device.run(["test", "-x", "/system/bin/sh"]).exit_code == 0


def test_arguments_reach_the_device_unsplit(device):
    assert device.run(["printf", "[%s]", "a b", "$HOME", "it's"]).stdout == "[a b][$HOME][it's]"


def test_pushed_program_runs_from_data_local_tmp(device, tmp_path):
    script = tmp_path / "hello"
    script.write_text('#!/system/bin/sh\necho "hello from $0 as $(id -u)"\nexit 3\n')
    device.push(script, "/data/local/tmp/hello")
    result = device.run(["/data/local/tmp/hello"])
    assert (result.exit_code, result.stdout) == (3, "hello from /data/local/tmp/hello as 2000\n")
    device.check_program(["/data/local/tmp/hello"])
    with pytest.raises(DroidheapError, match="no such file"):
        device.check_program(["/data/local/tmp/absent"])
    device.push(script, "/data/local/tmp/hello-not-executable", mode=0o644)
    with pytest.raises(DroidheapError, match="hello-not-executable: permission denied$"):
        device.check_program(["/data/local/tmp/hello-not-executable"])


def test_facts_of_a_user_build(device):
    facts = device.facts
    assert facts.abi == device.abi and facts.abi in facts.abilist
    assert (facts.sdk, facts.build_type, facts.root, facts.selinux) == (34, "user", None, "Permissive")
    assert device.describe().startswith(f"adb device {device.serial} (")


def test_getprop_and_setprop(device):
    device.set_properties({"debug.droidheap.test": "on"})
    assert device.getprop("debug.droidheap.test") == "on"
    device.set_properties({"debug.droidheap.test": ""})
    assert device.getprop("debug.droidheap.test") == ""
    # As on a phone, only root sets heapprofd's properties.
    with pytest.raises(DroidheapError, match="cannot set heapprofd.enable on"):
        device.set_properties({"heapprofd.enable": "1"})


def test_pidof_tells_an_app_from_its_service_process(device):
    sleep = shutil.which("sleep")
    for name in ("com.example.app", "com.example.app:service"):
        device.push(pathlib.Path(sleep), f"/data/local/tmp/{name}")
    try:
        started = device.run_script("cd /data/local/tmp && (./com.example.app 30 & "
                                    "./com.example.app:service 30 &) >/dev/null 2>&1")
        assert started.exit_code == 0
        app, service = device.pidof("com.example.app"), device.pidof("com.example.app:service")
        assert len(app) == 1 and len(service) == 1 and app != service
        assert device.process_exists(app[0])
        assert device.pidof("com.example.ap") == []
        # What -n 'PATTERN' is matched against: argv[0]'s name, every process's.
        names = device.program_names()
        assert names[app[0]] == "com.example.app" and names[service[0]] == \
            "com.example.app:service", names
        assert len(names) > 2, names
    finally:
        device.run_script("kill $(pidof com.example.app com.example.app:service)")


def test_root_device_runs_as_root(adb_env, extra_adbds, tmp_path):
    adbd = start_test_adbd(root=True)
    extra_adbds.append(adbd)
    serial = adb_env.connect(adbd)
    try:
        device = AdbDevice(serial=serial)
        assert (device.facts.root, device.facts.build_type) == ("adbd", "userdebug")
        assert device.getprop("ro.debuggable") == "1"
        assert device.run(["id", "-u"]).stdout == "0\n"
        device.set_properties({"heapprofd.enable": "1"})
        assert device.getprop("heapprofd.enable") == "1"
        assert "already running as root" in adb_env.adb("-s", serial, "root").stdout
        # The emulated bionic is in every program run there, under bionic's name and path as on
        # a phone; /system is read-only, even to root.
        maps = device.run(["cat", "/proc/self/maps"])
        assert maps.exit_code == 0 and "/system/lib64/libc.so\n" in maps.stdout
        (tmp_path / "nothing").write_bytes(b"x")
        with pytest.raises(DroidheapError, match="Read-only file system"):
            device.push(tmp_path / "nothing", "/system/bin/nothing")
        assert "Read-only" in device.run(["touch", "/system/bin/x"]).stderr
    finally:
        adb_env.adb("disconnect", serial, check=False)


def test_adb_root_is_refused_on_a_user_build(adb_env, device):
    assert "cannot run as root" in adb_env.adb("-s", device.serial, "root").stdout


def test_old_shell_service_mixes_output_and_keeps_no_exit_code(adb_env, device):
    # `adb shell -x` asks for the pre-v2 `shell:` service.
    result = adb_env.adb("-s", device.serial, "shell", "-x", "echo out; echo err >&2; exit 3",
                         check=False)
    assert (result.returncode, sorted(result.stdout.split())) == (0, ["err", "out"])


def test_adb_pulls_a_directory_through_list(adb_env, device, tmp_path):
    device.run(["mkdir", "-p", "/data/local/tmp/tree/sub"])
    (tmp_path / "a").write_bytes(b"first")
    device.push(tmp_path / "a", "/data/local/tmp/tree/sub/a")
    adb_env.adb("-s", device.serial, "pull", "/data/local/tmp/tree", str(tmp_path / "out"))
    assert (tmp_path / "out" / "sub" / "a").read_bytes() == b"first"


def test_a_large_pull_draws_a_progress_bar_on_a_terminal_only(device, tmp_path, monkeypatch,
                                                                capsys):
    import droidheap.device.adb as adb_module
    source = tmp_path / "source"
    source.write_bytes(os.urandom(3 * 1024 * 1024))
    remote = "/data/local/tmp/progress"
    device.push(source, remote, mode=0o644)
    device.pull(remote, tmp_path / "quiet")
    assert capsys.readouterr().out == ""
    bars = []

    class Bar:
        def __init__(self, label, length):
            bars.append([label, length, 0])

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, steps):
            bars[-1][2] += steps
    monkeypatch.setattr(adb_module, "watched", lambda: True)
    monkeypatch.setattr(adb_module, "progress_bar", Bar)
    device.pull(remote, tmp_path / "watched")
    assert (tmp_path / "watched").read_bytes() == source.read_bytes()
    assert bars == [["pulling progress", 3 * 1024 * 1024, 3 * 1024 * 1024]]
    device.remove(remote)
