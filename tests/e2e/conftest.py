"""End-to-end fixtures: the test program, a fresh emulated device, and a way to run the CLI."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def alloc_program(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("programs") / "alloc_sites"
    subprocess.run(["cc", "-O1", "-g", "-fno-omit-frame-pointer", "-pthread",
                    str(ROOT / "tests" / "programs" / "alloc_sites.c"), "-o", str(out)],
                   check=True)
    return out


@pytest.fixture
def device_root(tmp_path) -> pathlib.Path:
    root = tmp_path / "device"
    root.mkdir()
    return root


class Cli:
    def __init__(self, device_root: pathlib.Path):
        self.env = dict(os.environ, DROIDHEAP_DEVICE_ROOT=str(device_root))

    def command(self, *args):
        return [sys.executable, "-m", "droidheap.cli", *map(str, args)]

    def run(self, *args, timeout=180):
        return subprocess.run(self.command(*args), capture_output=True, text=True, env=self.env,
                              timeout=timeout)

    def start(self, *args):
        return subprocess.Popen(self.command(*args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env)


@pytest.fixture
def cli(device_root) -> Cli:
    return Cli(device_root)


def daemon_pids(device_root: pathlib.Path):
    """The droidheapd processes serving `device_root` (not those of other sessions on this host)."""
    pids = []
    for proc in pathlib.Path("/proc").iterdir():
        try:
            if (proc.name.isdigit() and (proc / "comm").read_text().strip() == "droidheapd"
                    and str(device_root).encode() in (proc / "cmdline").read_bytes()):
                pids.append(int(proc.name))
        except OSError:  # gone meanwhile
            pass
    return pids
