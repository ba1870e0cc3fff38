"""heap_profile's flags on droidheap's command line: all in `droidheap --help`, each reaching what
runs on the device (`--print-config` shows it without a device)."""
import importlib.metadata

import pytest

from tests.unit.test_cli_errors import run_cli

# heap_profile's flags that droidheap has, with droidheap's device flags.
FLAGS = ["-n, --name", "-p, --pid", "--all", "-i, --interval", "-d, --duration",
         "-c, --continuous-dump", "--dump-at-max",
         "--block-client / --no-block-client", "--block-client-timeout", "--shmem-size",
         "--no-running", "--no-startup", "--print-config", "-o, --output", "-s, --serial",
         "--local", "--version", "--exact-totals / --no-exact-totals",
         "--disable-fork-teardown", "--heaps", "--all-heaps"]


def test_top_level_help_lists_every_flag_and_the_usage_forms(tmp_path):
    result = run_cli(["--help"], tmp_path)
    assert result.returncode == 0, result.stderr
    for flag in FLAGS:
        assert flag in result.stdout, flag
    for form in ["-- CMD ARGS...", "-n NAME[,NAME]", "-p PID[,PID]", "--all",
                 "shell -- CMD ARGS..."]:
        assert "droidheap [DEVICE OPTIONS]" in result.stdout and form in result.stdout, form


def test_version_names_the_installed_package(tmp_path):
    for args in (["--version"], ["--local", "--version"]):
        result = run_cli(args, tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"droidheap {importlib.metadata.version('droidheap')}"


def print_config(tmp_path, *args):
    result = run_cli(["--print-config", *args], tmp_path)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_print_config_shows_the_daemon_command_and_touches_no_device(tmp_path):
    out = print_config(tmp_path, "--local", "-i", "512", "-c", "250", "--no-block-client",
                       "--dump-at-max", "--shmem-size", "65536", "--no-exact-totals",
                       "--disable-fork-teardown", "--",
                       "/bin/prog@x", "arg")
    words = out.splitlines()[0].split()
    assert words[0] == "droidheapd"
    for flag, value in [("--interval", "512"), ("--dump-interval-ms", "250"),
                        ("--shmem-size", "65536"), ("--name", "prog")]:
        assert words[words.index(flag) + 1] == value, out
    assert "--no-block-client" in words and "--block-timeout-us" not in words
    assert "--dump-at-max" in words and "--no-exact-totals" in words
    assert "--disable-fork-teardown" in words
    # The stack copy shrinks with the buffer: a record fits in half of it.
    assert int(words[words.index("--max-stack") + 1]) <= 65536 // 2 - 328
    assert "then starts: /bin/prog@x arg" in out
    assert not (tmp_path / "device").exists()


@pytest.mark.parametrize("args, names, pids, every_process", [
    (["-n", "a,b"], "a,b", None, False),
    (["-n", "a", "--no-startup"], None, None, False),  # running ones only: pids found at start
    (["-n", "a", "--no-running"], "a", None, False),
    (["-p", "12,13"], None, "12,13", False),
    (["--all"], None, None, True),
    (["--all", "--no-startup"], None, None, False),
])
def test_print_config_targets_follow_running_and_startup(tmp_path, args, names, pids,
                                                         every_process):
    words = print_config(tmp_path, "--local", *args).split()
    assert (words[words.index("--name") + 1] if "--name" in words else None) == names
    assert (words[words.index("--pid") + 1] if "--pid" in words else None) == pids
    assert ("--all" in words) == every_process
    assert words[words.index("--block-timeout-us") + 1] == "5000000"


def test_print_config_in_platform_mode_is_heapprofds_config(tmp_path):
    out = print_config(tmp_path, "--mode", "platform", "-n", "com.example.app", "--no-running",
                       "--block-client-timeout", "1500", "-i", "8192", "--dump-at-max",
                       "--disable-fork-teardown")
    for line in ['process_cmdline: "com.example.app"', "no_running: true", "dump_at_max: true",
                 "disable_fork_teardown: true",
                 "block_client_timeout_us: 1500", "sampling_interval_bytes: 8192"]:
        assert line in out, out
    assert "no_startup" not in out


@pytest.mark.parametrize("args, heaps, all_heaps", [
    ([], None, False),
    (["--heaps", "pool, libc.malloc,pool"], "pool,libc.malloc", False),  # once each, in order
    (["--all-heaps"], None, True),
])
def test_print_config_carries_the_heaps(tmp_path, args, heaps, all_heaps):
    words = print_config(tmp_path, "--local", *args, "--", "prog").split()
    assert (words[words.index("--heaps") + 1] if "--heaps" in words else None) == heaps
    assert ("--all-heaps" in words) == all_heaps


def test_print_config_in_platform_mode_carries_the_heaps(tmp_path):
    out = print_config(tmp_path, "--mode", "platform", "-n", "app", "--heaps", "pool,arena")
    assert 'heaps: "pool"' in out and 'heaps: "arena"' in out and "all_heaps" not in out
    out = print_config(tmp_path, "--mode", "platform", "-n", "app", "--all-heaps")
    assert "all_heaps: true" in out and 'heaps: "' not in out


def test_unreachable_reaches_the_daemon_and_platform_mode_refuses_it(tmp_path):
    assert "--unreachable" in print_config(tmp_path, "--local", "--unreachable", "--", "prog").split()
    result = run_cli(["--print-config", "--mode", "platform", "-n", "app", "--unreachable"],
                     tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip() == ("droidheap: --unreachable needs droidheap's own "
                                     "client in the process: the platform's heapprofd (platform "
                                     "mode) cannot look for unreachable memory"), result.stderr


def test_print_config_in_platform_mode_takes_all(tmp_path):
    assert "all: true" in print_config(tmp_path, "--mode", "platform", "--all")
