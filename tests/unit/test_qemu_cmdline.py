"""tests/adbd/qemu_cmdline.c: a guest program that qemu-user runs under binfmt_misc's P flag shows
other processes its own argv in /proc/PID/cmdline, as on a phone, while its own view of its
command line, and every other program's, stays as it was.

The kernel's P-flag start is emulated (`INTERP /abs/prog /abs/prog ARGS`) and the library given
through LD_PRELOAD, which reaches qemu itself as the device's /etc/ld.so.preload would."""
import os
import pathlib
import shutil
import subprocess
from typing import Optional, Tuple

import pytest

from tests.adbd.host_library import QEMU_CMDLINE_SOURCE, build_host_library
from tests.requirements import require

QEMU_AARCH64_P = "/usr/libexec/qemu-binfmt/aarch64-binfmt-P"
CROSS_CC = "aarch64-linux-gnu-gcc"

# Prints its /proc/self/cmdline (qemu answers that from the guest's argv) with spaces for the
# NULs, then stays alive until stdin closes, so that the test reads its /proc/PID/cmdline from
# outside while it runs.
_GUEST_SOURCE = r"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(void) {
  char buf[4096];
  int fd = open("/proc/self/cmdline", O_RDONLY);
  ssize_t n = fd < 0 ? 0 : read(fd, buf, sizeof(buf));
  if (n > 0 && buf[n - 1] == '\0') n--;
  for (ssize_t i = 0; i < n; i++)
    if (buf[i] == '\0') buf[i] = ' ';
  printf("%.*s\n", (int)(n > 0 ? n : 0), buf);
  fflush(stdout);
  while (read(0, buf, sizeof(buf)) > 0) {}
  return 0;
}
"""


def why_no_aarch64_guest() -> Optional[str]:
    if not os.path.exists(QEMU_AARCH64_P):
        return f"no {QEMU_AARCH64_P} (Debian packages qemu-user, qemu-user-binfmt)"
    if shutil.which(CROSS_CC) is None:
        return f"no {CROSS_CC} (Debian package gcc-aarch64-linux-gnu)"
    return None


def library_and_guest(tmp_path_factory, library_source: pathlib.Path, guest_source: str,
                      name: str) -> Tuple[pathlib.Path, pathlib.Path]:
    """(the host library built from `library_source`, the static aarch64 program `name` built
    from `guest_source`), in a new directory; skipped where neither can run here."""
    require(why_no_aarch64_guest())
    out = tmp_path_factory.mktemp(name)
    library = build_host_library(library_source, out)
    source = out / f"{name}.c"
    source.write_text(guest_source)
    guest = out / name
    subprocess.run([CROSS_CC, "-static", "-O2", "-o", str(guest), str(source)], check=True)
    return library, guest


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Tuple[pathlib.Path, pathlib.Path]:
    """(the library, a static aarch64 guest program printing its own command line)."""
    return library_and_guest(tmp_path_factory, QEMU_CMDLINE_SOURCE, _GUEST_SOURCE,
                             "print_cmdline")


def _run_guest(guest: pathlib.Path, library: Optional[pathlib.Path]) -> Tuple[bytes, str]:
    """Starts `guest argone argtwo` as the kernel does under the P flag; returns (its
    /proc/PID/cmdline read from here, what it printed of its own)."""
    env = {key: value for key, value in os.environ.items() if key != "LD_PRELOAD"}
    if library is not None:
        env["LD_PRELOAD"] = str(library)
    with subprocess.Popen([QEMU_AARCH64_P, str(guest), str(guest), "argone", "argtwo"], env=env,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE) as process:
        try:
            # Once it has printed, qemu's start (and the library's constructor) is behind it.
            own_view = process.stdout.readline().decode().rstrip("\n")
            cmdline = pathlib.Path(f"/proc/{process.pid}/cmdline").read_bytes()
        finally:
            process.stdin.close()
            process.wait(timeout=30)
    assert process.returncode == 0
    return cmdline, own_view


def test_guest_cmdline_seen_from_outside_is_the_guest_argv(built):
    library, guest = built
    cmdline, own_view = _run_guest(guest, library)
    assert cmdline == f"{guest}\0argone\0argtwo\0".encode()
    assert own_view == f"{guest} argone argtwo"


def test_without_the_library_the_cmdline_starts_with_the_interpreter(built):
    """What the library fixes, so the test above can fail: qemu's two words come first."""
    _, guest = built
    cmdline, own_view = _run_guest(guest, None)
    assert cmdline == f"{QEMU_AARCH64_P}\0{guest}\0{guest}\0argone\0argtwo\0".encode()
    assert own_view == f"{guest} argone argtwo"


def test_programs_not_started_by_binfmt_keep_their_cmdline(built):
    # Three arguments, so that only argv[0]'s name keeps the library away.
    library, _ = built
    argv = ["/bin/sh", "-c", "echo ready; read line"]
    with subprocess.Popen(argv, env=dict(os.environ, LD_PRELOAD=str(library)),
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE) as process:
        try:
            assert process.stdout.readline() == b"ready\n"
            cmdline = pathlib.Path(f"/proc/{process.pid}/cmdline").read_bytes()
        finally:
            process.stdin.close()
            process.wait(timeout=30)
    assert cmdline == b"".join(arg.encode() + b"\0" for arg in argv)


def test_build_failure_raises_oserror_with_the_first_error(tmp_path):
    broken = tmp_path / "broken.c"
    broken.write_text("static void f(void) {}\nint g(void) { return h(); }\n")
    with pytest.raises(OSError, match=r"broken\.c:2:\d+: error: implicit declaration"):
        build_host_library(broken, tmp_path / "out")
