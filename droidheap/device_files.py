"""The device's own files (its libraries, an app's code) pulled to symbolize with: kept per build
id in droidheap's cache (`device-files/<build id>/<file name>`), so that a phone's libc crosses
the cable once, not on every run. Each output directory still gets its copies under
`device-files/`, at their device paths (hard links where it can), so that it can be symbolized
again on its own.

The cache is keyed by the build id the trace asked for, and a file goes in, or comes out, only
when its own build id is that one: a file that changed on the device since the trace, or that a
hostile phone served for another's name, seeds nothing that later sessions use. (A phone can
still forge the build id note of a file it serves; what it seeds then symbolizes only traces that
ask for that build id.) A pulled file that does not match stays in this output alone, where the
symbolizer, which checks build ids too, refuses it.

A library inside an APK (`…/base.apk!/lib/x86_64/libfoo.so`, or heapprofd's `…/base.apk!libfoo.so`)
is read as its entry's bytes alone (apk_library), on every device, and placed likewise.

Device paths and build ids are data (safe_paths): one that is not a plain absolute path, or hex,
or that leads out of the output directory, is skipped; the symbolizer warns of it.
"""
import pathlib
import struct
from typing import List, Optional, Sequence, Tuple

from droidheap.apk_library import read_library, split_library_path
from droidheap.device.base import Device
from droidheap.elf.headers import file_build_id, read_headers
from droidheap.errors import DroidheapError
from droidheap.output_files import link_output, make_private_dirs, write_output
from droidheap.safe_paths import UnsafePath, hex_build_id, mirror_path, plain_name
from droidheap.symbol_cache import cache_root


def _place(source: pathlib.Path, target: pathlib.Path) -> bool:
    """`target` (checked: safe_paths) becomes `source`'s twin; a link already at its name is
    replaced, never followed."""
    try:
        make_private_dirs(target.parent)
        link_output(source, target)
        return True
    except OSError:
        return False


def _cache_entry(cache: pathlib.Path, device_path: str, build_id: str) -> Optional[pathlib.Path]:
    try:
        return cache / hex_build_id(build_id) / plain_name(pathlib.PurePosixPath(device_path).name)
    except UnsafePath:
        return None


def _memory_build_id(data: bytes) -> str:
    try:
        return read_headers(data).build_id(data)
    except (ValueError, struct.error):
        return ""


def _extract_library(device: Device, device_path: str, build_id: str, target: pathlib.Path,
                     warnings: List[str]) -> bool:
    """A library inside an APK (apk_library): only its entry's bytes are read off the device."""
    apk, library = split_library_path(device_path)
    try:
        data = read_library(lambda offset, size: device.read_range(apk, offset, size),
                            device.file_size(apk), library, _memory_build_id, build_id)
        make_private_dirs(target.parent)
        write_output(target, data)
        return True
    except DroidheapError as e:
        warnings.append(f"cannot read {library} from {apk}: {e}; its frames stay unnamed")
    except OSError as e:
        warnings.append(f"cannot write {target}: {e.strerror}")
    return False


def fetch_device_files(device: Device, modules: Sequence[Tuple[str, str]], out_dir: pathlib.Path,
                       cache: Optional[pathlib.Path] = None,
                       warnings: Optional[List[str]] = None) -> Optional[pathlib.Path]:
    """Puts what it can of `modules` ((device path, build id)) under `out_dir` at their device
    paths, from the cache or else pulled (a library inside an APK: its entry's bytes); returns
    `out_dir`, or None when nothing was placed and the device's files are this machine's
    (Device.fetch_files). What could not be read is said in `warnings`."""
    cache = cache or cache_root() / "device-files"
    warnings = [] if warnings is None else warnings
    placed = False
    wanted: List[Tuple[str, str, pathlib.Path, Optional[pathlib.Path]]] = []
    for path, build_id in modules:
        try:
            target = mirror_path(out_dir, path)
        except UnsafePath:
            continue
        entry = _cache_entry(cache, path, build_id)
        if entry is not None and file_build_id(entry) == build_id and _place(entry, target):
            placed = True
        elif split_library_path(path):
            if _extract_library(device, path, build_id, target, warnings):
                placed = True
                if entry is not None and file_build_id(target) == build_id:
                    _place(target, entry)
        else:
            wanted.append((path, build_id, target, entry))
    fetched = device.fetch_files([path for path, _, _, _ in wanted], out_dir) if wanted else None
    if fetched is None:
        return out_dir if placed else None
    for _, build_id, target, entry in wanted:
        if entry is not None and file_build_id(target) == build_id:
            _place(target, entry)
    return out_dir
