"""Host (x86_64 glibc) libraries of the test device's --android mode, built from the C sources
beside this file with the host's compiler: Android's userland runs there under qemu-user, a host
program, which glibc's loader gives these through the device's /etc/ld.so.preload."""
import pathlib
import re
import subprocess
from typing import List

_HERE = pathlib.Path(__file__).resolve().parent
QEMU_CMDLINE_SOURCE = _HERE / "qemu_cmdline.c"  # a guest's /proc/PID/cmdline as on a phone
QEMU_MAPS_SOURCE = _HERE / "qemu_maps.c"  # a guest's own /proc/self/maps as on a phone
# `FILE:LINE:COL: error: ...`, `cc1: fatal error: ...`; not a path that merely holds "error".
_ERROR_DIAGNOSTIC = re.compile(r": (fatal )?error: ")


def build_host_library(source: pathlib.Path, out_dir: pathlib.Path) -> pathlib.Path:
    """Builds `source` into `out_dir`/droidheap_<its stem>.so and returns its path. Raises
    OSError, with the compiler's first error line, when it does not build."""
    out_dir.mkdir(parents=True, exist_ok=True)
    library = out_dir / f"droidheap_{source.stem}.so"
    result = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror",
                             "-o", str(library), str(source), "-ldl"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise OSError(f"cc could not build {library.name}: "
                      f"{_first_error_line(result.stderr, result.returncode)}")
    return library


def build_qemu_libraries(out_dir: pathlib.Path) -> List[pathlib.Path]:
    """Every library qemu is given on the device, built into `out_dir`."""
    return [build_host_library(source, out_dir)
            for source in (QEMU_CMDLINE_SOURCE, QEMU_MAPS_SOURCE)]


def _first_error_line(stderr: str, returncode: int) -> str:
    """gcc starts with context ("In function ..."): the first `error:` diagnostic is the cause."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if _ERROR_DIAGNOSTIC.search(line):
            return line
    return lines[0] if lines else f"exit status {returncode}"
