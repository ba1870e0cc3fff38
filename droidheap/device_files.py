"""The device's own files (its libraries, an app's code) pulled to symbolize with: kept per build
id in droidheap's cache (`device-files/<build id>/<file name>`), so that a phone's libc crosses
the cable once, not on every run. Each output directory still gets its copies under
`device-files/`, at their device paths (hard links where it can), so that it can be symbolized
again on its own."""
import os
import pathlib
import shutil
from typing import Optional, Sequence, Tuple

from droidheap.device.base import Device
from droidheap.elf.headers import NotElf, read_headers
from droidheap.symbol_cache import cache_root


def _place(source: pathlib.Path, target: pathlib.Path) -> bool:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        try:
            os.link(source, target)
        except OSError:  # another file system
            shutil.copyfile(source, target)
        return True
    except OSError:
        return False


def _build_id(path: pathlib.Path) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
        return read_headers(data).build_id(data)
    except (OSError, NotElf):
        return ""


def fetch_device_files(device: Device, modules: Sequence[Tuple[str, str]], out_dir: pathlib.Path,
                       cache: Optional[pathlib.Path] = None) -> Optional[pathlib.Path]:
    """Puts what it can of `modules` ((device path, build id)) under `out_dir` at their device
    paths, from the cache or else pulled; returns `out_dir`, or None when the device's files
    are this machine's (Device.fetch_files)."""
    cache = cache or cache_root() / "device-files"
    placed, wanted = False, []
    for path, build_id in modules:
        cached = cache / build_id / pathlib.PurePosixPath(path).name if build_id else None
        if cached is not None and cached.is_file() \
                and _place(cached, out_dir / path.lstrip("/")):
            placed = True
        else:
            wanted.append(path)
    fetched = device.fetch_files(wanted, out_dir) if wanted else None
    if fetched is None:
        return out_dir if placed else None
    for path in wanted:
        pulled = out_dir / path.lstrip("/")
        # Cached under the build id the file has: the device's may have changed since the trace.
        build_id = _build_id(pulled) if pulled.is_file() else ""
        if build_id:
            _place(pulled, cache / build_id / pulled.name)
    return out_dir
