"""The platform-heapprofd mode without a device: the TraceConfig read back with Perfetto's own
protos, the profileable decision from dumpsys outputs of Android 10 and 14, and the session's
device commands against a simulated perfetto."""
import re
import shlex
from typing import List, Optional

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from droidheap import platform_heapprofd
from droidheap.convert import convert_trace
from droidheap.device.adb import DeviceFacts, ShellResult
from droidheap.errors import DroidheapError
from droidheap.platform_heapprofd import (Eligibility, ProcessNamer, build_trace_config,
                                          check_profileable, package_flags, run_platform_session)
from droidheap.session import ProfileOptions
from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import parse_trace
from fixtures_dumpsys import missing_package_dump, package_dump
from fixtures_trace import TraceBuilder, two_process_trace

APP = "com.example.app"


def _config(options=ProfileOptions(), names=(APP,), pids=(), duration_ms=0) -> pb.TraceConfig:
    return pb.TraceConfig.FromString(build_trace_config(options, list(names), list(pids),
                                                        duration_ms))


def _heapprofd(config: pb.TraceConfig) -> pb.HeapprofdConfig:
    (source,) = [s.config for s in config.data_sources if s.config.name == "android.heapprofd"]
    return source.heapprofd_config


# ---- the trace config ----------------------------------------------------------------------

def test_config_has_one_buffer_that_every_data_source_writes_to():
    config = _config()
    assert len(config.buffers) == 1
    assert config.buffers[0].fill_policy == pb.TraceConfig.BufferConfig.RING_BUFFER
    assert config.buffers[0].size_kb > 0
    assert [s.config.name for s in config.data_sources] == ["android.heapprofd",
                                                            "linux.process_stats"]
    assert all(s.config.target_buffer == 0 for s in config.data_sources)
    assert config.data_sources[1].config.process_stats_config.scan_all_processes_on_start
    assert config.write_into_file and config.flush_timeout_ms >= 10000
    assert config.flush_period_ms == 0  # heapprofd would dump on each flush


def test_default_flags_sample_malloc_every_4096_bytes_blocking_the_client():
    config = _config()
    heap = _heapprofd(config)
    assert heap.sampling_interval_bytes == 4096
    assert list(heap.process_cmdline) == [APP] and list(heap.pid) == []
    assert heap.shmem_size_bytes == 8 * 1024 * 1024
    assert heap.block_client and heap.block_client_timeout_us == 5_000_000
    assert not heap.HasField("continuous_dump_config")
    assert list(heap.heaps) == [] and not heap.all_heaps and not heap.all
    assert config.duration_ms == 0  # until stopped


@pytest.mark.parametrize("options, names, pids, duration_ms", [
    (ProfileOptions(sampling_interval=1, dump_interval_ms=250, block_client=False,
                    shmem_size=65536), [], [4321, 4322], 10000),
    (ProfileOptions(sampling_interval=32768, dump_interval_ms=1000), [APP, f"{APP}:remote"],
     [77], 2500),
    (ProfileOptions(sampling_interval=512, shmem_size=1 << 20), ["surfaceflinger"], [], 0),
    (ProfileOptions(heaps=("libc.malloc", "pool")), [APP], [], 0),
    (ProfileOptions(all_heaps=True), [APP], [], 0),
    (ProfileOptions(max_daemon_memory=0, max_trace_size=0), [APP], [], 0),
    (ProfileOptions(max_daemon_memory=64 << 20, max_trace_size=1 << 30), [APP], [], 0),
])
def test_flags_reach_their_heapprofd_config_fields(options, names, pids, duration_ms):
    config = _config(options, names, pids, duration_ms)
    heap = _heapprofd(config)
    assert heap.sampling_interval_bytes == options.sampling_interval
    assert list(heap.process_cmdline) == names and list(heap.pid) == pids
    assert heap.shmem_size_bytes == options.shmem_size
    assert heap.block_client == options.block_client
    assert heap.HasField("block_client_timeout_us") == options.block_client
    assert heap.HasField("continuous_dump_config") == bool(options.dump_interval_ms)
    assert (tuple(heap.heaps), heap.all_heaps) == (options.heaps, options.all_heaps)
    if options.dump_interval_ms:
        dumps = heap.continuous_dump_config
        assert (dumps.dump_phase_ms, dumps.dump_interval_ms) == (options.dump_interval_ms,) * 2
    assert config.duration_ms == duration_ms
    # The guardrails, 0 = none in both.
    assert heap.max_heapprofd_memory_kb == options.max_daemon_memory // 1024
    assert config.max_file_size_bytes == options.max_trace_size


@pytest.mark.parametrize("options, names, pids, duration_ms, message", [
    (ProfileOptions(), [], [], 0, "needs targets"),
    (ProfileOptions(sampling_interval=0), [APP], [], 0, "at least 1 byte"),
    (ProfileOptions(shmem_size=3 * 65536), [APP], [], 0, "power of two"),
    (ProfileOptions(shmem_size=4096), [APP], [], 0, "at least 8192"),
    (ProfileOptions(), [APP], [], -1, "-d must be between"),
    (ProfileOptions(dump_interval_ms=2**32), [APP], [], 0, "-c must be between"),
])
def test_config_rejects_what_heapprofd_would(options, names, pids, duration_ms, message):
    with pytest.raises(DroidheapError, match=message):
        build_trace_config(options, names, pids, duration_ms)


# ---- may the platform profile it? ------------------------------------------------------------

@pytest.mark.parametrize("release", [10, 14])
@pytest.mark.parametrize("debuggable", [True, False])
def test_package_flags_read_debuggable_from_both_releases(release, debuggable):
    flags = package_flags(package_dump(release, APP, debuggable), APP)
    assert ("DEBUGGABLE" in flags) == debuggable
    assert {"HAS_CODE", "ALLOW_BACKUP"} <= flags


def test_package_flags_match_the_whole_package_name():
    dump = package_dump(14, f"{APP}.helper", True) + package_dump(14, APP, False)
    assert "DEBUGGABLE" not in package_flags(dump, APP)
    assert package_flags(missing_package_dump(APP), APP) is None



def _facts(serial: str, sdk: int, build_type: str) -> DeviceFacts:
    """A non-rooted arm64 phone's facts."""
    return DeviceFacts(serial=serial, model="Pixel", abi="arm64-v8a", abilist=["arm64-v8a"],
                       sdk=sdk, build_type=build_type, root=None, su_command="",
                       selinux="Enforcing")

class StubDevice:
    """Answers `dumpsys package` and `simpleperf_app_runner` as a phone of `sdk` would."""

    def __init__(self, sdk=34, build_type="user", dumpsys="",
                 app_type: Optional[ShellResult] = None):
        self.serial = "stub"
        self.facts = _facts("stub", sdk, build_type)
        self.answers = {"dumpsys": ShellResult(0, dumpsys, ""),
                        "simpleperf_app_runner": app_type or ShellResult(
                            127, "", "/system/bin/sh: simpleperf_app_runner: not found")}
        self.commands: List[List[str]] = []

    def describe(self):
        return f"adb device stub (Pixel, arm64-v8a, SDK {self.facts.sdk}, {self.facts.build_type})"

    def run(self, argv, timeout_s=30.0, max_output=None):
        self.commands.append(list(argv))
        return self.answers[argv[0]]


def test_android_9_is_refused_saying_root_would_work():
    with pytest.raises(DroidheapError, match=r"needs Android 10 \(SDK 29\); .* SDK 28: root"):
        check_profileable(StubDevice(sdk=28), APP)


@pytest.mark.parametrize("build_type", ["userdebug", "eng"])
def test_a_debug_build_profiles_any_app_without_asking_the_device(build_type):
    device = StubDevice(build_type=build_type)
    assert check_profileable(device, "surfaceflinger").verified
    assert device.commands == []


@pytest.mark.parametrize("sdk, release", [(29, 10), (34, 14)])
def test_a_debuggable_app_is_eligible_from_its_flags_alone(sdk, release):
    device = StubDevice(sdk=sdk, dumpsys=package_dump(release, APP, debuggable=True))
    assert check_profileable(device, APP) == Eligibility("debuggable", True)
    assert device.commands == [["dumpsys", "package", APP]]


def test_a_process_name_is_checked_as_its_package():
    device = StubDevice(dumpsys=package_dump(14, APP, debuggable=True))
    check_profileable(device, f"{APP}:remote")
    assert device.commands == [["dumpsys", "package", APP]]


def test_android_12_plus_asks_simpleperf_app_runner_about_profileable():
    device = StubDevice(dumpsys=package_dump(14, APP, False),
                        app_type=ShellResult(0, "profileable\n", ""))
    assert check_profileable(device, APP) == Eligibility("profileable", True)
    assert device.commands[-1] == ["simpleperf_app_runner", APP, "--show-app-type"]


def test_a_non_profileable_app_on_a_user_build_is_one_line_saying_what_would_work():
    device = StubDevice(dumpsys=package_dump(14, APP, False),
                        app_type=ShellResult(0, "non_profileable\n", ""))
    with pytest.raises(DroidheapError) as error:
        check_profileable(device, APP)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"{APP} is neither profileable nor debuggable")
    for remedy in ("root", "userdebug build", "debuggable build",
                   '<profileable android:shell="true"/>'):
        assert remedy in message


def test_android_10_cannot_tell_profileable_and_says_so():
    device = StubDevice(sdk=29, dumpsys=package_dump(10, APP, False))
    eligibility = check_profileable(device, APP)
    assert not eligibility.verified and "Android 10 and 11" in eligibility.reason
    assert device.commands == [["dumpsys", "package", APP]]


def test_without_simpleperf_app_runner_the_answer_is_unverified():
    eligibility = check_profileable(StubDevice(dumpsys=package_dump(14, APP, False)), APP)
    assert not eligibility.verified and "not found" in eligibility.reason


def test_an_app_that_is_not_installed_is_refused():
    device = StubDevice(dumpsys=missing_package_dump(APP))
    with pytest.raises(DroidheapError, match=f"{APP} is not an installed app on adb device stub"):
        check_profileable(device, APP)


# ---- the session ---------------------------------------------------------------------------

PID = 4242


class SimulatedDevice:
    """A device whose perfetto is a few states: started by the printf pipeline, alive until
    `kill -TERM` (or for `lives_for_polls` stat reads), then gone. Records every command."""

    def __init__(self, sdk=34, trace: bytes = b"", lives_for_polls: Optional[int] = None,
                 start: Optional[ShellResult] = None):
        self.serial = "sim"
        self.facts = _facts("sim", sdk, "user")
        self.trace = trace
        self.lives_for_polls = lives_for_polls
        self.start = start or ShellResult(0, f"{PID}\n", "")
        self.dies_on = "TERM"
        self.alive = False
        self.config = b""
        self.commands: List[str] = []

    def describe(self):
        return "adb device sim"

    def run(self, argv, timeout_s=30.0, max_output=None):
        return self.run_script(shlex.join(argv), timeout_s)

    def run_script(self, script, timeout_s=30.0, max_output=None):
        self.commands.append(script)
        if "| perfetto --background" in script:
            self.alive = self.start.exit_code == 0
            self.config = bytes(int(o, 8) for o in re.findall(r"\\(\d{3})", script))
            return self.start
        if script == f"cat /proc/{PID}/stat":
            if self.lives_for_polls is not None:
                self.alive = self.alive and self.lives_for_polls > 0
                self.lives_for_polls -= 1
            if self.alive:
                return ShellResult(0, f"{PID} (perfetto) S 1 {PID} {PID} 0 -1 4194560\n", "")
            return ShellResult(1, "", f"cat: /proc/{PID}/stat: No such file or directory\n")
        if script == f"kill -{self.dies_on} {PID}":
            self.alive = False
        return ShellResult(0, "", "")

    def pull(self, remote, local):
        self.commands.append(f"pull {remote}")
        local.write_bytes(self.trace)

    def remove(self, remote):
        self.commands.append(f"rm -f {remote}")

    # No process to watch (session_runs.cpu_ticks): what these tests follow is perfetto's.
    def pidof(self, name):
        return []

    def app_name(self, pid):
        return None

    def cpu_ticks(self, pid):
        return None

    def collapsed(self) -> List[str]:
        """The commands with repeated polls counted once."""
        out = []
        for command in self.commands:
            if not out or out[-1] != command:
                out.append(command)
        return out


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch):
    monkeypatch.setattr(platform_heapprofd, "_POLL_S", 0.01)


def _stop_after(calls: int):
    seen = []

    def stop_requested():
        seen.append(1)
        return len(seen) > calls
    return stop_requested


def test_session_starts_polls_stops_pulls_and_removes_in_that_order(tmp_path):
    trace = two_process_trace().to_bytes()
    device = SimulatedDevice(trace=trace)
    options = ProfileOptions(sampling_interval=512, dump_interval_ms=100)
    raw = run_platform_session(device, options, [APP], [], 0, tmp_path, _stop_after(3))
    assert raw == tmp_path / "raw-trace" and raw.read_bytes() == trace
    named, start, *rest = device.collapsed()
    path = re.search(r"-o (\S+)$", start).group(1)
    assert re.fullmatch(r"/data/misc/perfetto-traces/droidheap-\d+\.trace", path)
    assert named.endswith(f"echo {path} >> /data/local/tmp/droidheap/platform-traces")
    assert start.startswith("printf '") and f"| perfetto --background -c - -o {path}" in start
    assert rest == [f"cat /proc/{PID}/stat", f"kill -TERM {PID}", f"cat /proc/{PID}/stat",
                    f"pull {path}", f"rm -f {path}"]
    assert device.config == build_trace_config(options, [APP], [], 0)


def test_ctrl_c_stops_perfetto_cleanly_and_still_pulls(tmp_path):
    device = SimulatedDevice(trace=two_process_trace().to_bytes())

    def interrupted():
        raise KeyboardInterrupt
    raw = run_platform_session(device, ProfileOptions(), [], [123], 0, tmp_path, interrupted)
    assert raw.is_file() and f"kill -TERM {PID}" in device.commands


def test_a_failure_on_the_host_leaves_no_perfetto_running(tmp_path):
    device = SimulatedDevice(trace=two_process_trace().to_bytes())

    def broken():
        raise RuntimeError("host bug")
    with pytest.raises(RuntimeError):
        run_platform_session(device, ProfileOptions(), [APP], [], 0, tmp_path, broken)
    assert device.commands[-1] == f"kill -TERM {PID}" and not device.alive


def test_a_perfetto_that_ignores_sigterm_is_killed_and_its_trace_still_pulled(tmp_path,
                                                                              monkeypatch):
    monkeypatch.setattr(platform_heapprofd, "_STOP_TIMEOUT_S", 0.1)
    device = SimulatedDevice(trace=two_process_trace().to_bytes())
    device.dies_on = "KILL"
    notes = []
    raw = run_platform_session(device, ProfileOptions(), [APP], [], 0, tmp_path, _stop_after(1),
                               notes.append)
    assert raw.is_file() and f"kill -KILL {PID}" in device.commands
    assert notes == ["warning: perfetto did not stop within 0 s and was killed; the trace holds "
                     "what it had written"]


def test_perfetto_ending_at_its_duration_is_not_signalled(tmp_path):
    device = SimulatedDevice(trace=two_process_trace().to_bytes(), lives_for_polls=2)
    run_platform_session(device, ProfileOptions(), [APP], [], 200, tmp_path)
    assert not any(c.startswith("kill") for c in device.commands)
    assert device.commands[-2].startswith("pull ")


def test_android_10_reuses_one_trace_name_it_cannot_delete(tmp_path):
    """Named for `droidheap pull` like any other; AdbDevice.remove takes the name back where the
    shell may not delete it (tests/adb/test_platform_heapprofd.py)."""
    device = SimulatedDevice(sdk=29, trace=two_process_trace().to_bytes())
    run_platform_session(device, ProfileOptions(), [APP], [], 0, tmp_path, _stop_after(1))
    path = "/data/misc/perfetto-traces/droidheap-platform.trace"
    assert any(f"echo {path} >> " in command for command in device.commands)
    assert device.commands[-2:] == [f"pull {path}", f"rm -f {path}"]


def test_a_perfetto_that_cannot_start_is_one_line(tmp_path):
    device = SimulatedDevice(start=ShellResult(127, "", "/system/bin/sh: perfetto: not found\n"))
    with pytest.raises(DroidheapError, match="^perfetto did not start on sim: /system/bin/sh: "
                                             "perfetto: not found$"):
        run_platform_session(device, ProfileOptions(), [APP], [], 0, tmp_path)


def test_an_empty_trace_points_at_the_tracing_service(tmp_path):
    device = SimulatedDevice(trace=b"", lives_for_polls=0)
    with pytest.raises(DroidheapError, match="empty trace.*persist.traced.enable"):
        run_platform_session(device, ProfileOptions(), [APP], [], 0, tmp_path)


def test_a_trace_without_dumps_names_the_targets_and_keeps_the_trace(tmp_path):
    trace = TraceBuilder().clock_snapshot().process(1, "init").to_bytes()
    device = SimulatedDevice(trace=trace)
    with pytest.raises(DroidheapError, match=f"no heap dump of {APP}, pid 77 .*raw-trace holds"):
        run_platform_session(device, ProfileOptions(), [APP], [77], 0, tmp_path, _stop_after(1))
    assert (tmp_path / "raw-trace").read_bytes() == trace


class ProcessListing:
    """A device whose shell answers the ProcessNamer's script with `records`, then nothing."""

    def __init__(self, *records: str):
        self.records = list(records)
        self.scripts: List[str] = []

    def run_script(self, script, timeout_s=30.0, max_output=None):
        self.scripts.append(script)
        return ShellResult(0, self.records.pop(0) if self.records else "", "")


def test_process_namer_notes_each_named_process_it_sees_run():
    device = ProcessListing("@301\n/data/local/tmp/prog\n--flag\n\n@302\ncom.example.app\n\n",
                            "@303\n\n")
    namer = ProcessNamer(device, ["prog", "com.example.app"])
    assert namer() is False  # never asks the session to stop
    assert namer() is False  # within half a second: the device is not asked again
    assert len(device.scripts) == 1
    assert device.scripts[0].startswith("for p in $(pidof prog com.example.app); do")
    assert namer.argvs == {301: ["/data/local/tmp/prog", "--flag"], 302: ["com.example.app"]}
    namer._next_poll = 0
    namer()
    assert namer.argvs[303] == []  # a kernel thread's or a zombie's: nothing to name it by


def test_a_process_namer_poll_the_device_does_not_answer_is_skipped_and_said_once():
    class SlowDevice(ProcessListing):
        def run_script(self, script, timeout_s=30.0, max_output=None):
            if len(self.scripts) < 2:
                self.scripts.append(script)
                raise DroidheapError("adb shell on sim failed (for p in ...): the device did not "
                                     "answer in time (the command took more than 30 s)")
            return super().run_script(script, timeout_s, max_output)

    notes: List[str] = []
    device = SlowDevice("@301\nprog\n\n")
    namer = ProcessNamer(device, ["prog"], notes.append)
    for _ in range(3):
        namer._next_poll = 0
        assert namer() is False  # the session goes on
    assert len(device.scripts) == 3 and namer.argvs == {301: ["prog"]}
    assert notes == ["warning: adb shell on sim failed (for p in ...): the device did not answer "
                     "in time (the command took more than 30 s); the outputs may not name every "
                     "process of the session by its command line"]


# ---- the trace the platform writes ---------------------------------------------------------

def _android10_trace() -> bytes:
    """As an Android 10 phone writes it: the tracing service's packets, process_stats' process
    tree, and heapprofd's dumps with their string, mapping, frame and call stack tables inside the
    ProfilePacket (interned_data came with Android 11) and no heap name; the second dump is split
    over two packets and reuses the first one's tables."""
    service, processes, heapprofd = 1, 2, 3
    packets = [pb.TracePacket(trusted_packet_sequence_id=service, trace_config=_config()),
               pb.TracePacket(trusted_packet_sequence_id=service)]
    for clock, ns in ((pb.BUILTIN_CLOCK_BOOTTIME, 9_000_000_000),
                      (pb.BUILTIN_CLOCK_MONOTONIC_COARSE, 8_000_000_000),
                      (pb.BUILTIN_CLOCK_REALTIME, 1_600_000_000_000_000_000)):
        packets[-1].clock_snapshot.clocks.add(clock_id=clock, timestamp=ns)
    tree = pb.TracePacket(trusted_packet_sequence_id=processes)
    tree.process_tree.processes.add(pid=4321, ppid=600, cmdline=[APP])
    packets.append(tree)

    first = pb.TracePacket(trusted_packet_sequence_id=heapprofd, sequence_flags=1)
    profile = first.profile_packet
    for iid, text in enumerate([b"system", b"lib64", b"libc.so", b"data", b"app", b"libapp.so",
                                b"malloc", b"make_widget", b"\x12\x34\x56\x78"], start=1):
        profile.strings.add(iid=iid, str=text)
    profile.mappings.add(iid=1, path_string_ids=[1, 2, 3], start=0x7000_0000, end=0x7010_0000)
    profile.mappings.add(iid=2, path_string_ids=[4, 5, 6], build_id=9, start=0x5500_0000,
                         end=0x5502_0000)
    profile.frames.add(iid=1, mapping_id=2, rel_pc=0x1234, function_name_id=8)
    profile.frames.add(iid=2, mapping_id=1, rel_pc=0x4444, function_name_id=7)
    profile.callstacks.add(iid=1, frame_ids=[1, 2])
    dump = profile.process_dumps.add(pid=4321, timestamp=8_500_000_000)
    dump.samples.add(callstack_id=1, self_allocated=8192, self_freed=4096, alloc_count=2,
                     free_count=1)
    packets.append(first)
    for index, (allocated, continued) in enumerate([(16384, True), (0, False)], start=1):
        later = pb.TracePacket(trusted_packet_sequence_id=heapprofd)
        later.profile_packet.index, later.profile_packet.continued = index, continued
        dump = later.profile_packet.process_dumps.add(pid=4321, timestamp=9_500_000_000)
        if allocated:
            dump.samples.add(callstack_id=1, self_allocated=allocated, alloc_count=4)
        packets.append(later)
    packets.append(pb.TracePacket(trusted_packet_sequence_id=service,
                                  trace_stats=pb.TraceStats(producers_connected=2)))
    return pb.Trace(packet=packets).SerializeToString()


def test_an_android_10_heapprofd_trace_converts_like_droidheapds(tmp_path):
    raw = tmp_path / "raw-trace"
    raw.write_bytes(_android10_trace())
    result = convert_trace(raw, tmp_path / "out")
    assert [p.name for p in result.pprof_paths] == ["heap_dump.0.4321.libc.malloc.pb.gz",
                                                    "heap_dump.1.4321.libc.malloc.pb.gz"]
    (process,) = result.processes
    assert (process.cmdline, process.dumps, process.allocated) == (APP, 2, 16384)
    assert f"pid 4321 ({APP})" in result.summary_text
    # Frames resolve through the ProfilePacket's own tables, root first as heapprofd writes them.
    dumps = rebuild_dumps(parse_trace(raw.read_bytes()).packets)
    (frames,) = {s.frames for d in dumps.dumps[4321] for s in d.samples}
    assert [(f.mapping.path, f.function_name) for f in frames] == [
        ("/data/app/libapp.so", "make_widget"), ("/system/lib64/libc.so", "malloc")]
    assert frames[0].mapping.build_id == "12345678"


def test_lacks_lists_on_demand_dumps_and_what_replaces_them():
    assert any("kill -USR1" in line and "-c" in line for line in platform_heapprofd.LACKS)
