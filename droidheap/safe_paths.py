"""Paths that a device or a file names are data, never directions on this machine: a trace's
mapping paths and build ids, a library's debug link, the traces a phone lists. Before one becomes
a host path it must be what such a path can be (absolute and normalised, a plain file name, hex),
and what it names, symlinks already there followed, must stay inside the directory meant for it.
Otherwise a mapping path `/x/../../home/u/.bashrc`, from a hostile phone or a trace someone sent,
or a symlink planted in a directory someone sent, would make droidheap write the user's files.

Each check raises UnsafePath, naming the path, for the caller to warn of and skip it. The
directory an output goes in (named by the user, or made by droidheap) is trusted; what is inside
it is not.
"""
import os
import pathlib
import re

from droidheap.errors import DroidheapError

# Long enough for any build id a linker writes (lld's --build-id=0x<hex> included), short enough
# for a file name.
_BUILD_ID = re.compile(r"(?:[0-9a-f]{2}){1,64}")


class UnsafePath(DroidheapError):
    pass


def device_relative(device_path: str) -> str:
    """`device_path` without its leading "/": refused unless absolute and normalised (no empty,
    "." or ".." component)."""
    parts = device_path[1:].split("/")
    if not device_path.startswith("/") or "\0" in device_path \
            or any(part in ("", ".", "..") for part in parts):
        raise UnsafePath(f"refused the device path {device_path!r}: not an absolute, "
                         "normalised path")
    return device_path[1:]


def contained(root: pathlib.Path, path: pathlib.Path, what: str) -> pathlib.Path:
    """`path` (under `root`), refused when what it names, symlinks followed, is not inside
    `root`; `what` is what the refusal names."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real == real_root or os.path.commonpath([real_root, real]) != real_root:
        raise UnsafePath(f"refused {what!r}: {path} leads outside {root}")
    return path


def mirror_path(root: pathlib.Path, device_path: str) -> pathlib.Path:
    """Where `device_path` goes in `root`, a directory that mirrors the device's paths."""
    return contained(root, root / device_relative(device_path), device_path)


def plain_name(name: str) -> str:
    """A file name a device or a file gave: one component, neither "." nor ".."."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise UnsafePath(f"refused the file name {name!r}: not a plain file name")
    return name


def hex_build_id(build_id: str) -> str:
    """A build id as droidheap keys files by: lower-case hex bytes."""
    if not _BUILD_ID.fullmatch(build_id):
        raise UnsafePath(f"refused the build id {build_id!r}: not hex")
    return build_id
