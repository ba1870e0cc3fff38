"""Bad input gets one clear line on stderr and a non-zero exit, never a traceback."""
import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import THIS_MACHINES_PROCESSES

pytestmark = THIS_MACHINES_PROCESSES  # --local sessions


def run_cli(args, tmp_path, **kwargs):
    env = dict(os.environ, DROIDHEAP_DEVICE_ROOT=str(tmp_path / "device"))
    return subprocess.run([sys.executable, "-m", "droidheap.cli", *args], capture_output=True,
                          text=True, env=env, timeout=60, **kwargs)


def assert_one_line_error(result, expected, code=None):
    assert result.returncode != 0
    assert code is None or result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("droidheap: ")
    assert expected in lines[0]


@pytest.mark.parametrize("args, expected", [
    (["-i", "0"], "'--interval'"),
    (["-i", "x"], "'--interval'"),
    (["-d", "-5"], "'--duration'"),
    (["-c", "-1"], "'--continuous-dump'"),
    (["--shmem-size", "4096"], "'--shmem-size'"),
    (["--shmem-size", str(3 << 20)], "power of two"),
    (["--block-client-timeout", "0"], "'--block-client-timeout'"),
    (["--no-startup"], "--no-startup cannot go with -- CMD"),
    (["--no-running"], "--no-running applies to -n"),
    (["--heaps", ","], "'--heaps': no heap named"),
    (["--heaps", "my heap"], "'--heaps': 'my heap' is not a heap name"),
    (["--heaps", "x" * 64], "at most 63 bytes"),
    (["--heaps", "pool,ar\nena"], "'ar\\nena' is not a heap name"),  # and still one line
    (["--heaps", "caf\u00e9"], "is not a heap name"),  # not ASCII
    (["--heaps", ",".join(f"heap{i:02}{'x' * 40}" for i in range(6))], "more than 255 bytes"),
    (["--heaps", "pool", "--all-heaps"], "--all-heaps already records every heap"),
])
def test_rejects_bad_values_with_usage_exit_code(tmp_path, args, expected):
    result = run_cli(["--local", *args, "--", "true"], tmp_path)
    assert_one_line_error(result, expected, code=2)


def test_rejects_unknown_process_name_when_not_waiting_for_it_to_start(tmp_path):
    result = run_cli(["--local", "-n", "no-such-program-xyz", "--no-startup"], tmp_path)
    assert_one_line_error(result, "no process named no-such-program-xyz")


def test_rejects_unknown_pid(tmp_path):
    result = run_cli(["--local", "-p", "999999999"], tmp_path)
    assert_one_line_error(result, "no process with pid 999999999")


def test_rejects_malformed_pid(tmp_path):
    result = run_cli(["--local", "-p", "12x"], tmp_path)
    assert_one_line_error(result, "invalid pid")


def test_rejects_non_empty_output_dir(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "something").write_text("x")
    result = run_cli(["--local", "-o", str(out), "--", "true"], tmp_path)
    assert_one_line_error(result, "is not empty")


def test_an_output_that_is_a_file_or_cannot_be_made_is_said_so(tmp_path):
    (tmp_path / "file").write_text("x")
    result = run_cli(["--local", "-o", str(tmp_path / "file"), "--", "true"], tmp_path)
    assert_one_line_error(result, f"-o {tmp_path / 'file'} is a file: -o names the directory")
    result = run_cli(["--local", "-o", str(tmp_path / "file" / "out"), "--", "true"], tmp_path)
    assert_one_line_error(result, f"cannot make the output directory {tmp_path / 'file' / 'out'}"
                                  ": Not a directory")


@pytest.mark.parametrize("devices, example", [
    (["--local"], "droidheap --local shell -- CMD"),
    (["--local", "--abi", "arm64-v8a"], "droidheap --local --abi arm64-v8a shell -- CMD"),
    (["-s", "emulator-5554"], "droidheap -s emulator-5554 shell -- CMD"),
])
def test_shell_without_a_command_shows_one_on_the_device_chosen(tmp_path, devices, example):
    assert_one_line_error(run_cli([*devices, "shell"], tmp_path), f"shell needs a command: {example}")


def test_rejects_program_that_cannot_start(tmp_path):
    result = run_cli(["--local", "--", str(tmp_path / "missing-program")], tmp_path)
    assert_one_line_error(result, "cannot start")


def test_rejects_unknown_option(tmp_path):
    result = run_cli(["--local", "--frobnicate", "--", "true"], tmp_path)
    assert_one_line_error(result, "--frobnicate")


@pytest.mark.parametrize("args, expected", [
    (["-n", "a", "--", "true"], "either -- CMD ARGS... or -n/-p/--all"),
    (["--all", "-p", "12"], "no -n or -p with it"),
    ([], "nothing to profile"),
    (["-n", "a", "--no-running", "--no-startup"], "leave nothing to profile"),
    (["-p", "1", "--no-running"], "leaves -p nothing to profile"),
    (["-n", "com.example.*", "--no-running"], "leaves a pattern nothing to profile"),
])
def test_requires_one_kind_of_target(tmp_path, args, expected):
    result = run_cli(["--local", *args], tmp_path)
    assert_one_line_error(result, expected, code=2)


def test_refuses_to_signal_a_process_without_the_emulated_libc(tmp_path):
    # The profiling signal would kill a process that has no handler for it.
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        result = run_cli(["--local", "-p", str(sleeper.pid)], tmp_path)
        assert_one_line_error(result, "not started on the emulated device")
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_shell_passes_the_exit_code_through(tmp_path, installed_binaries):
    result = run_cli(["--local", "shell", "--", "sh", "-c", "exit 7"], tmp_path)
    assert result.returncode == 7, result.stderr


def test_without_local_and_without_adb_says_what_to_do(tmp_path, monkeypatch):
    # An adb server that cannot start, on a port of its own: never the user's server.
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(_free_port()))
    monkeypatch.setenv("ADBUTILS_ADB_PATH", str(tmp_path / "no-adb"))
    result = run_cli(["-n", "x"], tmp_path)
    assert_one_line_error(result, "cannot start the adb server")
    assert "--local" in result.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def installed_binaries():
    from droidheap import native
    from droidheap.native import host_abi
    native.binary_dir(host_abi(), required=(native.EMULATED_LIBC,), target=native.LINUX)
