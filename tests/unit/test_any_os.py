"""droidheap on any host OS (the py3-none-any wheel): a phone session imports nothing that only
Linux has, and --local, which is this machine, says in one line that it needs Linux.
tests/adb/test_bare_wheel.py runs that wheel's phone session with the same modules taken away and
this machine's /proc empty."""
import os
import subprocess
import sys

from droidheap import cli

LINUX_ONLY_MODULES = ("fcntl", "termios", "pty", "resource", "tty")
# A sitecustomize.py: put on a run's PYTHONPATH, it makes LINUX_ONLY_MODULES unimportable, as
# they are on Windows.
WITHOUT_LINUX_MODULES = f"""import sys


class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name in {LINUX_ONLY_MODULES!r}:
            raise ImportError(f"no module named {{name!r}} (taken away by the test)")
        return None


sys.meta_path.insert(0, _Absent())
"""
# What a phone session, and report, diff, check and symbolize, load as they run.
_PHONE_PATH = ("droidheap.cli", "droidheap.commands.device_choice", "droidheap.device.adb",
               "droidheap.session", "droidheap.session_runs", "droidheap.platform_heapprofd",
               "droidheap.convert", "droidheap.device_files", "droidheap.results.load",
               "droidheap.results.report", "droidheap.results.diff", "droidheap.results.page")


def test_the_phone_path_imports_nothing_only_linux_has(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(WITHOUT_LINUX_MODULES)
    script = (f"import importlib, sys\n"
              f"for name in {_PHONE_PATH!r}: importlib.import_module(name)\n"
              f"print('droidheap.device.local' in sys.modules)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path[1:]]))
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "False\n"
    taken = subprocess.run([sys.executable, "-c", "import fcntl"], env=env, capture_output=True,
                           text=True, timeout=60)
    assert "taken away by the test" in taken.stderr  # the check above checked something


def test_local_on_another_os_says_in_one_line_that_it_needs_linux(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setenv("DROIDHEAP_DEVICE_ROOT", str(tmp_path / "device"))
    assert cli.main(["--local", "--", "/bin/true"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("droidheap: --local needs Linux and droidheap's Linux wheel or a "
                          "source install (scripts/install)"), err
    assert err.count("\n") == 1, err
    assert not (tmp_path / "device").exists()  # nothing made of an emulated device
