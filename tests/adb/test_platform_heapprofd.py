"""The platform-heapprofd mode through a real adb server and the test adbd, whose perfetto,
dumpsys and simpleperf_app_runner are stand-ins (tests/adbd/bin) reading and writing files in
/data/local/tmp/fake-android: the device commands in order, the config perfetto receives, the
trace pulled, converted and removed, and the profileable check's answers."""
import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
from typing import List

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from droidheap.convert import convert_trace
from droidheap.device.adb import AdbDevice
from droidheap.device.adb_shell import ANSWER_MAX_BYTES
from droidheap.errors import DroidheapError
from droidheap.platform_heapprofd import check_profileable, run_platform_session
from droidheap.session import ProfileOptions
from unit.fixtures_dumpsys import package_dump
from unit.fixtures_trace import two_process_trace

from .conftest import ONE_ADB_SERVER, ROOT

pytestmark = ONE_ADB_SERVER  # the device commands and the trace, whichever server carries them

FAKE_DIR = "/data/local/tmp/fake-android"
APP = "com.example.app"


class RecordingAdbDevice(AdbDevice):
    """An AdbDevice that notes each shell command and pull, in order, after it has opened."""

    def __init__(self, serial: str):
        self.commands: List[str] = []
        super().__init__(serial=serial)
        self.commands.clear()  # what reading the device's facts ran

    def run_script(self, script, timeout_s=30.0, max_output=ANSWER_MAX_BYTES):
        self.commands.append(script)
        return super().run_script(script, timeout_s, max_output)

    def pull(self, remote, local):
        self.commands.append(f"pull {remote}")
        super().pull(remote, local)

    def put(self, tmp_path: pathlib.Path, name: str, data: bytes) -> None:
        """Leaves a file for the stand-in tools."""
        local = tmp_path / f"fake-{name}"
        local.write_bytes(data)
        self.push(local, f"{FAKE_DIR}/{name}", mode=0o644)


@pytest.fixture
def device(adb_env, shell_device, tmp_path):
    device = RecordingAdbDevice(shell_device.serial)
    device.run_script(f"rm -rf {FAKE_DIR} && mkdir -p {FAKE_DIR}")
    device.put(tmp_path, "perfetto.trace", two_process_trace().to_bytes())
    device.commands.clear()
    return device


def _perfetto_log(device) -> List[dict]:
    text = device.run(["cat", f"{FAKE_DIR}/perfetto.log"]).stdout
    return [json.loads(line) for line in text.splitlines()]


def _without_repeats(commands: List[str]) -> List[str]:
    return [c for i, c in enumerate(commands) if i == 0 or commands[i - 1] != c]


def test_session_runs_perfetto_then_stops_pulls_and_removes_its_trace(device, tmp_path):
    options = ProfileOptions(sampling_interval=512, dump_interval_ms=100, block_client=False,
                             shmem_size=1 << 20)
    polls = []
    raw = run_platform_session(device, options, [APP], [4321], 0, tmp_path / "out",
                               stop_requested=lambda: len(polls.append(1) or polls) > 20)

    commands = _without_repeats(device.commands)
    # Before perfetto starts: the pids asked for looked up (tested elsewhere), its trace named.
    at = next(i for i, command in enumerate(commands) if "perfetto --background" in command)
    named, start, rest = commands[at - 1], commands[at], commands[at + 1:]
    path = re.search(r" -o (\S+)$", start).group(1)
    assert path.startswith("/data/misc/perfetto-traces/droidheap-")
    # Named where `droidheap pull` looks, should this session die before pulling its trace.
    assert named == (f"mkdir -p /data/local/tmp/droidheap && echo {path} >> "
                     "/data/local/tmp/droidheap/platform-traces")
    log = _perfetto_log(device)
    pid = int(re.search(r"/proc/(\d+)/stat", rest[0]).group(1))
    named = "/data/local/tmp/droidheap/platform-traces"
    assert rest == [f"cat /proc/{pid}/stat", f"kill -TERM {pid}", f"cat /proc/{pid}/stat",
                    f"pull {path}", f"rm -f {path}",
                    f"grep -vxF {path} {named} > {named}.new; mv {named}.new {named}"]
    assert path not in device.run(["cat", named]).stdout

    assert [e["event"] for e in log] == ["start", "stop", "wrote"]
    assert log[0]["argv"] == ["--background", "-c", "-", "-o", path] and log[0]["uid"] == 2000
    assert log[1]["by"] == "SIGTERM"
    config = pb.TraceConfig.FromString(bytes.fromhex(log[0]["config"]))
    heap = config.data_sources[0].config.heapprofd_config
    assert (list(heap.process_cmdline), list(heap.pid)) == ([APP], [4321])
    assert (heap.sampling_interval_bytes, heap.shmem_size_bytes, heap.block_client) == \
        (512, 1 << 20, False)
    assert heap.continuous_dump_config.dump_interval_ms == 100 and config.duration_ms == 0

    assert raw.read_bytes() == two_process_trace().to_bytes()
    assert log[2]["bytes"] == raw.stat().st_size
    result = convert_trace(raw, tmp_path / "out")
    assert sorted({p.name.split(".")[2] for p in result.pprof_paths}) == ["100", "200"]
    assert device.run(["test", "-e", path]).exit_code == 1


def test_perfetto_that_ends_at_its_duration_is_left_to_end(device, tmp_path):
    run_platform_session(device, ProfileOptions(), [], [4321], 300, tmp_path)
    assert [e.get("by") for e in _perfetto_log(device)] == [None, "duration", None]
    assert not any(c.startswith("kill") for c in device.commands)


def test_a_trace_without_dumps_is_one_line_naming_the_targets(device, tmp_path):
    device.put(tmp_path, "perfetto.trace", pb.Trace(packet=[pb.TracePacket(
        trusted_packet_sequence_id=1)]).SerializeToString())
    with pytest.raises(DroidheapError, match=f"recorded no heap dump of {APP}"):
        run_platform_session(device, ProfileOptions(), [APP], [], 200, tmp_path)


@pytest.mark.parametrize("app_type", ["profileable", "debuggable"])
def test_check_profileable_accepts_what_the_platform_profiles(device, tmp_path, app_type):
    device.put(tmp_path, f"dumpsys-package-{APP}",
               package_dump(14, APP, app_type == "debuggable").encode())
    device.put(tmp_path, "app-types", f"{APP} {app_type}\n".encode())
    eligibility = check_profileable(device, APP)
    assert (eligibility.reason, eligibility.verified) == (app_type, True)


def test_check_profileable_refuses_a_non_profileable_app_on_a_user_build(device, tmp_path):
    device.put(tmp_path, f"dumpsys-package-{APP}", package_dump(14, APP, False).encode())
    device.put(tmp_path, "app-types", f"{APP} non_profileable\n".encode())
    with pytest.raises(DroidheapError, match=f"^{APP} is neither profileable nor debuggable, "
                                             f"and adb device {device.serial} .* is a user build"):
        check_profileable(device, APP)
    with pytest.raises(DroidheapError, match="com.example.absent is not an installed app"):
        check_profileable(device, "com.example.absent")


def test_cli_platform_mode_profiles_an_app_and_writes_the_outputs(device, tmp_path):
    device.put(tmp_path, f"dumpsys-package-{APP}", package_dump(14, APP, False).encode())
    device.put(tmp_path, "app-types", f"{APP} profileable\n".encode())
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "ANDROID_SERIAL"}
    result = subprocess.run([sys.executable, "-m", "droidheap.cli", "-s", device.serial,
                             "--mode", "platform", "-n", APP, "-d", "300", "-o", str(out)],
                            capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "platform mode" in result.stderr and "platform mode lacks" in result.stderr
    assert "Wrote profiles to" in result.stderr
    assert list(out.glob("heap_dump.*.pb.gz")) and (out / "symbolized-trace").is_file()
    refused = subprocess.run([sys.executable, "-m", "droidheap.cli", "-s", device.serial,
                              "--mode", "platform", "--", "/system/bin/sh"],
                             capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert refused.returncode != 0 and "cannot start a program" in refused.stderr


def test_pull_collects_a_platform_trace_its_session_left(device, tmp_path):
    """A platform session that died (droidheap killed) before pulling leaves perfetto's trace in
    /data/misc/perfetto-traces, which the shell may not list: `droidheap pull` collects it, named
    by the session, as it does droidheapd's; but not while a perfetto runs, whose it may be."""
    left = "/data/misc/perfetto-traces/droidheap-1700000000.trace"
    local = tmp_path / "left.trace"
    local.write_bytes(two_process_trace().to_bytes())
    device.push(local, left, mode=0o644)
    # As PlatformSession.start names it (test_session_runs_perfetto_then_stops_pulls_and_...).
    device.run_script(f"mkdir -p /data/local/tmp/droidheap && echo {left} >> "
                      "/data/local/tmp/droidheap/platform-traces")
    env = {k: v for k, v in os.environ.items() if k != "ANDROID_SERIAL"}
    pull = [sys.executable, "-m", "droidheap.cli", "-s", device.serial, "pull", "-o"]
    device.run_script(f"cp /bin/sleep {FAKE_DIR}/perfetto")  # a process named perfetto
    running = device.run_script(f"{FAKE_DIR}/perfetto 30 >/dev/null 2>&1 & echo $!")
    try:
        waiting = subprocess.run([*pull, str(tmp_path / "busy")], capture_output=True, text=True,
                                 env=env, timeout=120, cwd=ROOT)
    finally:
        device.run(["kill", running.stdout.strip()])
    assert waiting.returncode == 0 and "no trace left on" in waiting.stderr, waiting.stderr
    pulled = subprocess.run([*pull, str(tmp_path / "pulled")], capture_output=True, text=True,
                            env=env, timeout=120, cwd=ROOT)
    assert pulled.returncode == 0, pulled.stderr
    assert list((tmp_path / "pulled" / "droidheap-1700000000").glob("heap_dump.*.pb.gz")), \
        pulled.stdout + pulled.stderr
    assert device.run(["test", "-e", left]).exit_code == 1


def test_android_10s_platform_trace_the_shell_cannot_delete_is_not_pulled_again(device):
    """Android 10 keeps the shell from deleting perfetto's traces: once pulled, the one trace its
    platform sessions overwrite is no longer named for `droidheap pull` (which would pull it
    forever); on 11 and later a trace that could not be deleted stays named and is an error."""
    path = "/data/misc/perfetto-traces/droidheap-platform.trace"
    named = "/data/local/tmp/droidheap/platform-traces"
    # A directory: `rm -f` fails on it, as the shell's does on Android 10's traces.
    device.run_script(f"mkdir -p {path} && mkdir -p /data/local/tmp/droidheap && "
                      f"echo {path} >> {named}")
    try:
        assert path in device.leftover_traces()
        device.facts = dataclasses.replace(device.facts, sdk=30)
        with pytest.raises(DroidheapError, match="cannot remove"):
            device.remove(path)
        assert path in device.leftover_traces()
        device.facts = dataclasses.replace(device.facts, sdk=29)
        device.remove(path)
        assert path not in device.leftover_traces()
    finally:
        device.run_script(f"rmdir {path}")
