"""The Android test device's property area writer (tests/adbd/prop_area.py): what it keeps and
how it refuses. That bionic itself reads the area is tests/adb/test_android_device.py's."""
import struct

import pytest

from tests.adbd.prop_area import PROP_VALUE_MAX, AreaFull, PropertyArea


def serial_of(area_path, name: str) -> int:
    data = area_path.read_bytes()
    at = data.index(name.encode() + b"\0") - 4 - PROP_VALUE_MAX  # the prop_info before the name
    return struct.unpack_from("<I", data, at)[0]


def test_values_are_kept_changed_and_published_with_a_new_serial(tmp_path):
    path = tmp_path / "__properties__"
    area = PropertyArea(path)
    area.write({"ro.build.type": "userdebug", "debug.a.b": "1", "debug.a": "x"})
    before = serial_of(path, "debug.a.b")
    area.set("debug.a.b", "changed")
    after = serial_of(path, "debug.a.b")
    assert after >> 24 == len("changed") and after & 1 == 0  # its length, not left dirty
    assert (after & 0xFFFFFF) > (before & 0xFFFFFF)
    assert area.read() == {"ro.build.type": "userdebug", "debug.a.b": "changed", "debug.a": "x"}
    assert path.stat().st_mode & 0o777 == 0o644  # bionic refuses an area others may write


def test_a_long_value_is_set_once(tmp_path):
    area = PropertyArea(tmp_path / "__properties__")
    area.set("ro.long", "v" * 300)
    assert area.get("ro.long") == "v" * 300
    with pytest.raises(ValueError):
        area.set("ro.long", "w" * 300)


def test_a_full_area_refuses_and_keeps_what_it_has(tmp_path):
    area = PropertyArea(tmp_path / "__properties__")
    added = 0
    with pytest.raises(AreaFull):
        while True:
            area.set(f"debug.filler.{added}", "x" * 80)
            added += 1
    assert added > 500
    assert area.get("debug.filler.0") == "x" * 80
    assert area.get(f"debug.filler.{added - 1}") == "x" * 80
    assert area.get(f"debug.filler.{added}") is None
