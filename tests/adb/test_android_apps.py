"""Apps as phones run them, on the Android test devices: a test zygote (tests/programs/zygote.c)
forks "apps" as Android's zygote does (android_mallopt's M_SET_ZYGOTE_CHILD, the name written
over argv and given to PR_SET_NAME, M_INIT_ZYGOTE_CHILD_PROFILING when profileable), and each
loads its JNI library (tests/programs/jni_demo.c, stripped as the Android Gradle plugin packs it)
straight from an APK, as the linker maps an app's code: `dlopen("…/base.apk!/lib/ABI/…")`.

droidheapd unwinds through the library inside the APK (its CFI, .ARM.exidx, build id and load
bias read at the entry's offset); the host names the frames as the linker does, pulls only the
library's bytes, and symbolizes them from the app's build tree (--symbols, where the unstripped
library lies deep in `build/intermediates/`). An app that is not profileable gets one line saying
why nothing was profiled.

Android 11 (x86_64, natively) shows the name zygote gives a child in /proc/PID/cmdline, as a
phone does: every route runs there. Under qemu (Android 10, arm64-v8a and armeabi-v7a) a rewritten
argv is not seen (../shared/android/README.md): the apps are attached by pid there."""
import pathlib
import re
import signal
import subprocess
import time

import pytest

from tests.android import compile_android_program, write_apk
from tests.e2e.conftest import finished, kill_all
from tests.e2e.test_profile import read_line_containing
from tests.e2e.trace_check import assert_trace_processor_agrees, last_pprof_of, read_dumps

from .conftest import ROOT, AdbCli, serve_adb
from .test_android_sessions import start_on_device, summary_of

APP, OTHER = "com.example.app", "com.example.other"  # OTHER is not profileable
APP_DIR = "/data/app/~~Q2hpY2tlbg==/com.example.app-Zm9vYmFy=="
GO = "/data/local/tmp/go"
ANDROID_11_ONLY = pytest.mark.parametrize("android_release", ["android11"], indirect=True)
# What the app's JNI function allocates, all kept: 4096 blocks of 1024 bytes.
JNI_SITE = "Java_com_example_app_MainActivity_allocate"
JNI_BYTES = 4096 * 1024
IN_USE_SPACE = 3  # droidheap's pprof values: alloc_objects, alloc_space, inuse_objects, inuse_space


class AppFiles:
    """One ABI's test zygote, its app's APK (the library stripped inside) and the app's Gradle
    build directory (the unstripped library where the Android Gradle plugin leaves it)."""

    def __init__(self, out: pathlib.Path, abi: str):
        self.abi = abi
        out.mkdir(parents=True)
        self.zygote = compile_android_program(ROOT / "tests" / "programs" / "zygote.c",
                                              out / "zygote", abi)
        self.gradle = out / "project" / "app" / "build"
        unstripped = (self.gradle / "intermediates" / "merged_native_libs" / "release" / "out" /
                      "lib" / abi / "libjnidemo.so")
        unstripped.parent.mkdir(parents=True)
        compile_android_program(ROOT / "tests" / "programs" / "jni_demo.c", unstripped, abi,
                                shared=True)
        self.unstripped = unstripped
        stripped = out / "libjnidemo.so"
        subprocess.run(["llvm-strip-14", "--strip-all", "-o", str(stripped), str(unstripped)],
                       check=True)
        self.apk = out / "base.apk"
        self.entry = f"lib/{abi}/libjnidemo.so"
        write_apk(self.apk, {"AndroidManifest.xml": b"<manifest/>", "classes.dex": bytes(70000),
                             self.entry: stripped.read_bytes(),
                             "resources.arsc": bytes(5000)}, compressed=["classes.dex"])

    @property
    def device_zygote(self) -> str:
        """Called "zygote" as a phone's is, what droidheap knows an app's parent by."""
        return f"/data/local/tmp/{self.abi}/zygote"

    @property
    def device_apk(self) -> str:
        return f"{APP_DIR}/{self.abi}/base.apk"

    @property
    def library(self) -> str:
        """The library as droidheap names its frames: as the linker does."""
        return f"{self.device_apk}!/{self.entry}"

    def push(self, cli: AdbCli) -> None:
        cli.shell(f"mkdir -p {APP_DIR}/{self.abi} /data/local/tmp/{self.abi}")
        for local, remote in ((self.zygote, self.device_zygote), (self.apk, self.device_apk)):
            cli.adb_server.adb("-s", cli.serial, "push", str(local), remote)
        cli.shell(f"chmod 755 {self.device_zygote}; chmod 644 {self.device_apk}")

    def start_zygote(self, cli: AdbCli, *apps: str, linger_ms: int = 60000):
        """The zygote, its apps' output (and what their profiler's client logs) read here."""
        cli.shell(f"rm -f {GO}")
        return start_on_device(cli, self.device_zygote, self.device_apk, self.abi, "--wait-file",
                               GO, "--linger", str(linger_ms), *apps, "2>&1")


@pytest.fixture(scope="module")
def adb_server(tmp_path_factory):
    yield from serve_adb("adb36", tmp_path_factory, android=True)


@pytest.fixture(scope="module")
def app_files(tmp_path_factory, android_release):
    """{abi: AppFiles} for each ABI the release runs (Android 10: both ARM ABIs)."""
    abis = ["arm64-v8a", "armeabi-v7a"] if android_release.version == 10 else ["x86_64"]
    out = tmp_path_factory.mktemp("apps")
    return {abi: AppFiles(out / abi, abi) for abi in abis}


@pytest.fixture
def app_cli(adb_server, android_root_device, app_files):
    cli = AdbCli(adb_server, android_root_device.serial)
    for files in app_files.values():
        files.push(cli)
    return cli


def waiting_apps(zygote: subprocess.Popen, count: int) -> dict:
    """{name: pid} of the apps that the zygote's output says wait for GO, and of the zygote
    ("zygote64")."""
    apps = {"zygote64": int(read_line_containing(zygote.stdout, "zygote pid=", 120)
                            .split("=")[1])}
    for _ in range(count):
        line = read_line_containing(zygote.stdout, " waiting", 120)
        name, pid = re.search(r"app (\S+) pid=(\d+) waiting", line).groups()
        apps[name] = int(pid)
    return apps


def stop_apps(cli: AdbCli, pids: dict) -> None:
    """The zygote and its apps, by pid: their names are not the program's any more."""
    if pids:
        cli.shell(f"kill -9 {' '.join(map(str, pids.values()))} 2>/dev/null")


def let_the_app_allocate(cli: AdbCli, zygote: subprocess.Popen, session: subprocess.Popen,
                         pid: int, settle_s: float = 0) -> tuple:
    """Once the session has the app: the app allocates, and `settle_s` after it is done the
    session is stopped by Ctrl-C. Returns the session's (stdout, stderr)."""
    cli.shell(f"touch {GO}")
    read_line_containing(zygote.stdout, f"app {APP} pid={pid} done", 120)
    time.sleep(settle_s)
    session.send_signal(signal.SIGINT)
    stdout, stderr = finished(session, 300)
    assert session.returncode == 0, stderr
    return stdout, stderr


def assert_jni_frames(said: str, pid: int, exact: bool, unstripped: bool = True) -> None:
    """The app's JNI function is its top call site in what droidheap `said`: from the unstripped
    library with its file and line, else by the name the stripped one exports."""
    summary = summary_of(said, pid)
    line = r" \(jni_demo\.c:\d+\)" if unstripped else ""
    site = re.search(rf"^\s+(\S+ \S+)\s+\S+ \S+\s+(\d+)\s+{JNI_SITE}{line}$", summary,
                     re.MULTILINE)
    assert site, said
    if exact:
        assert site.groups() == ("4.0 MiB", "4096"), summary


def assert_stacks_reach_the_entry(out: pathlib.Path, pid: int, files: AppFiles) -> None:
    """Each sample of the JNI function (every one of its bytes) unwound through the library in
    the APK to the zygote's main: frames named as in the pprof file."""
    profile = last_pprof_of(out, pid)
    strings = profile.string_table
    names = {f.id: strings[f.name] for f in profile.function}
    mappings = {m.id: strings[m.filename] for m in profile.mapping}
    assert files.library in mappings.values(), mappings
    in_jni = 0
    for sample in profile.sample:
        stack = [(names[line.function_id], mappings.get(location.mapping_id, ""))
                 for location_id in sample.location_id
                 for location in [next(loc for loc in profile.location if loc.id == location_id)]
                 for line in location.line]
        functions = [name for name, _ in stack]
        if JNI_SITE in functions:  # below the allocator's own frames
            at = functions.index(JNI_SITE)
            assert stack[at][1] == files.library
            assert functions[at + 1:at + 3] == ["run_app", "main"], functions
            in_jni += sample.value[IN_USE_SPACE]
    assert in_jni == JNI_BYTES


def test_attach_to_apps_through_their_jni_library_in_the_apk(app_cli, app_files, android_release,
                                                              tmp_path):
    """Attach to a running app (by its name where the device shows it, else by pid), `-c` and a
    dump asked for by `killall -USR1`, at -i 1: the JNI function's bytes exact, its stacks
    through the library to the app's entry, only the library's bytes pulled, and the app that is
    not profileable named in one line."""
    for abi, files in app_files.items():
        out = tmp_path / abi
        zygote = files.start_zygote(app_cli, APP, OTHER + ":unprofileable")
        session, pids = None, {}
        try:
            pids = waiting_apps(zygote, 2)
            target = ["-n", f"{APP},{OTHER}", "--no-startup"] if android_release.version >= 11 \
                else ["-p", f"{pids[APP]},{pids[OTHER]}"]
            session = app_cli.start(*target, "-o", out, "-i", "1", "-c", "1000", "--symbols",
                                    files.gradle.parent.parent)
            read_line_containing(session.stderr, f"attached to pid {pids[APP]}", 120)
            app_cli.shell(f"touch {GO}")
            read_line_containing(zygote.stdout, f"app {APP} pid={pids[APP]} done", 120)
            app_cli.shell("killall -USR1 droidheapd")
            session.send_signal(signal.SIGINT)
            _, stderr = finished(session, 300)
            assert session.returncode == 0, stderr
        finally:
            kill_all(session, zygote)
            stop_apps(app_cli, pids)
        assert_jni_frames(stderr, pids[APP], exact=True)
        assert_stacks_reach_the_entry(out, pids[APP], files)
        # Under qemu the process keeps the command line it started with.
        other = OTHER if android_release.version >= 11 else files.device_zygote
        assert f"warning: pid {pids[OTHER]} ({other}) was not profiled: it is an app" in stderr, \
            stderr
        assert "Traceback" not in stderr
        assert len(read_dumps(out / "raw-trace")[pids[APP]]) >= 3  # -c, USR1 and the last
        # The app's build tree had the library: nothing of it was pulled.
        assert not (out / "device-files" / files.library.lstrip("/")).exists()
        assert_trace_processor_agrees(out, files.unstripped, prefix="Java_",
                                      process_name=APP if android_release.version >= 11
                                      else files.device_zygote)
    app_cli.assert_left_as_it_was()


@ANDROID_11_ONLY
def test_an_app_started_during_the_session_is_profiled_from_its_start(app_cli, app_files,
                                                                      tmp_path):
    """`-n` before the app starts: bionic reads heapprofd.enable.<name> in the child when zygote
    marks it profileable (M_INIT_ZYGOTE_CHILD_PROFILING), under the name zygote just gave it, and
    loads the client there; the app that is not profileable is never loaded into, and said so.
    Without --symbols the library's bytes alone are pulled from the APK, and name its function."""
    (files,) = app_files.values()
    out = tmp_path / "out"
    session = zygote = None
    pids = {}
    try:
        session = app_cli.start("-n", f"{APP},{OTHER}", "-o", out)
        read_line_containing(session.stderr, "from the start of each new process", 60)
        zygote = files.start_zygote(app_cli, APP, OTHER + ":unprofileable", linger_ms=30000)
        pids = waiting_apps(zygote, 2)
        read_line_containing(session.stderr, f"profiling pid {pids[APP]} from its start", 60)
        _, stderr = let_the_app_allocate(app_cli, zygote, session, pids[APP])
    finally:
        kill_all(session, zygote)
        stop_apps(app_cli, pids)
    assert_jni_frames(stderr, pids[APP], exact=False, unstripped=False)
    pulled = out / "device-files" / files.library.lstrip("/")
    assert pulled.is_file() and pulled.stat().st_size < files.apk.stat().st_size / 4
    assert not list((out / "device-files").rglob("base.apk"))  # not the APK itself
    jni = sum(sample.value[IN_USE_SPACE] for sample in last_pprof_of(out, pids[APP]).sample)
    assert abs(jni - JNI_BYTES) < 0.1 * JNI_BYTES, jni  # every other site is a few KiB
    assert f"warning: pid {pids[OTHER]} ({OTHER}) was not profiled" in stderr, stderr
    app_cli.assert_left_as_it_was()


def profile_the_app(cli: AdbCli, files: AppFiles, out: pathlib.Path, flags, attached,
                    settle_s: float = 0) -> tuple:
    """A session given `flags(pid)` while the app waits; once `attached(session, zygote, pid)`
    returns, the app allocates (let_the_app_allocate). Returns (pid, stdout, stderr)."""
    zygote = files.start_zygote(cli, APP)
    session, pids = None, {}
    try:
        pids = waiting_apps(zygote, 1)
        session = cli.start(*flags(pids[APP]), "-o", out, "--symbols", files.gradle)
        attached(session, zygote, pids[APP])
        stdout, stderr = let_the_app_allocate(cli, zygote, session, pids[APP], settle_s)
    finally:
        kill_all(session, zygote)
        stop_apps(cli, pids)
    return pids[APP], stdout, stderr


@ANDROID_11_ONLY
def test_all_takes_the_app_with_the_rest(app_cli, app_files, tmp_path):
    (files,) = app_files.values()
    out = tmp_path / "out"
    pid, _, stderr = profile_the_app(
        app_cli, files, out, lambda _: ["--all", "-i", "1"],
        attached=lambda session, _, pid: read_line_containing(session.stderr,
                                                              f"attached to pid {pid}", 120))
    assert_jni_frames(stderr, pid, exact=True)
    assert_stacks_reach_the_entry(out, pid, files)
    app_cli.assert_left_as_it_was()


def test_platform_mode_profiles_the_app_with_the_platforms_heapprofd(app_cli, app_files,
                                                                     android_release, tmp_path):
    """Google's heapprofd names the library as tombstones do (`base.apk!libjnidemo.so`, its
    soname): the same library, found in the app's build tree all the same. Android 10's gives
    its mapping no load bias and only the mapping's offset in the APK: the library's code is
    found all the same. (By name where the device shows the app's, else by pid.)"""
    files = app_files[android_release.abi]
    out = tmp_path / "out"
    pid, _, stderr = profile_the_app(
        app_cli, files, out,
        lambda pid: ["--mode", "platform", "-i", "1",
                     *(["-n", APP] if android_release.version >= 11 else ["-p", str(pid)])],
        # Google's client logs on the app's standard error once it is in.
        attached=lambda _, zygote, __: read_line_containing(zygote.stdout,
                                                            "heapprofd_client initialized", 120),
        # heapprofd unwinds behind the app, and its last dump holds what it had unwound by then;
        # nothing outside tells when it has caught up (a tenth of a second natively).
        settle_s=3 if android_release.native else 10)
    assert_jni_frames(stderr, pid, exact=True)
    profile = last_pprof_of(out, pid)
    assert f"{files.device_apk}!libjnidemo.so" in \
        {profile.string_table[m.filename] for m in profile.mapping}
    app_cli.assert_left_as_it_was()


@ANDROID_11_ONLY
def test_an_idle_app_that_is_not_profileable_is_named_so_after_an_early_ctrl_c(app_cli, app_files,
                                                                              tmp_path):
    """An app that is not profileable never takes the signal, whatever its CPU does: the end of
    the session says so even when Ctrl-C came before droidheap stopped waiting for it to
    connect."""
    (files,) = app_files.values()
    zygote = files.start_zygote(app_cli, OTHER + ":unprofileable", linger_ms=30000)
    session, pids = None, {}
    try:
        pids = waiting_apps(zygote, 1)
        session = app_cli.start("-n", OTHER, "-o", tmp_path / "out")
        read_line_containing(session.stderr, "Ctrl-C to stop", 60)
        time.sleep(1)  # within the 5 s droidheap waits for signalled processes to connect
        session.send_signal(signal.SIGINT)
        _, stderr = finished(session, 120)
    finally:
        kill_all(session, zygote)
        stop_apps(app_cli, pids)
    assert (f"warning: pid {pids[OTHER]} ({OTHER}) was not profiled: it is an app, and bionic "
            "takes the profiling signal in an app only when the app is profileable") in stderr, \
        stderr
    app_cli.assert_left_as_it_was()
