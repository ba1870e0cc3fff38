"""tests/adbd/qemu_maps.c: a guest program run by qemu-user sees in its own /proc/self/maps each
segment of a file it mapped, as on a phone, where qemu 7.2 alone loses the read-only segment and
the code after it (the kernel merges them: qemu maps guest code without PROT_EXEC)."""
import os
import pathlib
import subprocess
from typing import List, Optional, Tuple

import pytest

from tests.adbd.host_library import QEMU_MAPS_SOURCE
from tests.unit.test_qemu_cmdline import QEMU_AARCH64_P, library_and_guest

# Maps its own file as a linker maps a library (a read-only page, then code from the next page
# of the file right after it in memory) and prints its /proc/self/maps lines for that file.
_GUEST_SOURCE = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int fd = open(argv[1], O_RDONLY);
  char *base = mmap(NULL, 3 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (fd < 0 || base == MAP_FAILED) return 2;
  if (mmap(base, 4096, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) == MAP_FAILED) return 3;
  if (mmap(base + 4096, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED, fd, 4096) ==
      MAP_FAILED) return 4;
  FILE *maps = fopen("/proc/self/maps", "r");
  char line[512];
  while (fgets(line, sizeof(line), maps) != NULL) {
    if (strstr(line, argv[1]) != NULL) fputs(line, stdout);
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """(the library, a static aarch64 guest program, the file it maps)."""
    library, guest = library_and_guest(tmp_path_factory, QEMU_MAPS_SOURCE, _GUEST_SOURCE,
                                       "maps_own_file")
    mapped = guest.parent / "segments.bin"
    mapped.write_bytes(bytes(3 * 4096))
    return library, guest, mapped


def _own_view(guest: pathlib.Path, mapped: pathlib.Path,
              library: Optional[pathlib.Path]) -> List[Tuple[str, str]]:
    """(permissions, file offset) of each line of the guest's own maps for `mapped`."""
    env = {key: value for key, value in os.environ.items() if key != "LD_PRELOAD"}
    if library is not None:
        env["LD_PRELOAD"] = str(library)
    result = subprocess.run([QEMU_AARCH64_P, str(guest), str(guest), str(mapped)], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result
    return [(fields[1], fields[2]) for fields in map(str.split, result.stdout.splitlines())]


def test_each_segment_is_its_own_line_with_the_library(built):
    library, guest, mapped = built
    assert _own_view(guest, mapped, library) == [("r--p", "00000000"), ("r-xp", "00001000")]


def test_without_the_library_qemu_loses_the_merged_segments(built):
    """What the library fixes, so the test above can fail."""
    _, guest, mapped = built
    assert _own_view(guest, mapped, None) != [("r--p", "00000000"), ("r-xp", "00001000")]
