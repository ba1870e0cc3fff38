"""Choosing the adb device, and what the user reads when that fails: one line saying what to do."""
import os
import socket
import subprocess
import sys
import time

import pytest

from droidheap.device.adb import AdbDevice
from droidheap.errors import DroidheapError

from .conftest import ROOT, AdbServer, free_port, start_test_adbd


def test_no_device(adb_env):
    with pytest.raises(DroidheapError, match="no adb device connected: plug in a phone"):
        AdbDevice()


def test_unknown_serial(adb_env, extra_adbds):
    extra_adbds.append(start_test_adbd())
    adb_env.connect(extra_adbds[0])
    try:
        with pytest.raises(DroidheapError, match=r"no adb device 127.0.0.1:1 \(from -s\); adb "
                                                 rf"devices lists: {extra_adbds[0].serial}"):
            AdbDevice(serial="127.0.0.1:1")
    finally:
        adb_env.disconnect_all()


def test_two_devices_need_a_serial(adb_env, extra_adbds, monkeypatch):
    extra_adbds += [start_test_adbd(), start_test_adbd(root=True)]
    first, second = (adb_env.connect(adbd) for adbd in extra_adbds)
    try:
        with pytest.raises(DroidheapError, match="2 adb devices connected .*: choose one with -s"):
            AdbDevice()
        assert AdbDevice(serial=second).facts.root == "adbd"
        monkeypatch.setenv("ANDROID_SERIAL", first)
        assert AdbDevice().facts.root is None
    finally:
        adb_env.disconnect_all()


def test_device_gone_offline(adb_env, extra_adbds):
    adbd = start_test_adbd()
    extra_adbds.append(adbd)
    serial = adb_env.connect(adbd)
    adbd.stop()
    try:
        deadline = time.monotonic() + 10
        while adb_env.states().get(serial) == "device" and time.monotonic() < deadline:
            time.sleep(0.05)
        # Both adb 29 and 36 keep a dropped TCP device listed as offline while they reconnect.
        assert adb_env.states().get(serial) == "offline"
        with pytest.raises(DroidheapError, match=f"adb device {serial} is offline: reconnect"):
            AdbDevice(serial=serial)
    finally:
        adb_env.disconnect_all()


def _cli(args, env):
    return subprocess.run([sys.executable, "-m", "droidheap.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, **env}, timeout=60)


def _one_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0 and len(lines) == 1 and "Traceback" not in result.stderr, \
        result.stderr
    return lines[0]


def test_cli_errors_are_one_line(adb_env, extra_adbds):
    assert _one_line(_cli(["shell", "--", "true"], adb_env.env)).startswith(
        "droidheap: no adb device connected")
    extra_adbds.append(start_test_adbd())
    serial = adb_env.connect(extra_adbds[0])
    try:
        assert "--mode root needs root on" in _one_line(
            _cli(["-s", serial, "--mode", "root", "--", "/system/bin/sh"], adb_env.env))
        assert "--disable-selinux needs root" in _one_line(
            _cli(["-s", serial, "--disable-selinux", "--", "/system/bin/sh"], adb_env.env))
        assert "apply to adb devices" in _one_line(_cli(["--local", "--mode", "preload", "-n",
                                                         "x"], adb_env.env))
        assert "apply to the emulator device" in _one_line(_cli(["--abi", "x86_64", "-n", "x"],
                                                                adb_env.env))
        result = _cli(["-s", serial, "shell", "--", "sh", "-c", "echo hi; exit 5"], adb_env.env)
        assert (result.returncode, result.stdout) == (5, "hi\n")
    finally:
        adb_env.disconnect_all()


def test_starts_an_adb_server_when_none_runs(adb_server, monkeypatch):
    server = AdbServer(adb_server.binary, free_port(), adb_server.bin_dir)
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)
    try:
        with pytest.raises(DroidheapError, match="no adb device connected"):
            AdbDevice()
        # Still running after droidheap is done with it, as after `adb devices`.
        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
    finally:
        server.adb("kill-server", check=False)
