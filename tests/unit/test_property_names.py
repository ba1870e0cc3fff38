"""The names that become bionic's start property, heapprofd.enable.<name>: accepted as Android's
init accepts property names, everything else refused in one line before any reaches a device."""
import pytest

from droidheap.device.local import program_name
from droidheap.device.names import check_start_name, start_properties
from droidheap.errors import DroidheapError


@pytest.mark.parametrize("name", ["com.example.app", "com.example.app:remote", "system_server",
                                  "surfaceflinger", "android.hardware.foo@1.0-service",
                                  "a-b_c.d"])
def test_accepts_the_names_android_accepts(name):
    check_start_name(name)
    assert start_properties(name) == ["heapprofd.enable", f"heapprofd.enable.{name}"]


@pytest.mark.parametrize("name", ["x;y", "a b", "$(id)", "..x", "x.", ".x", "", "a/b", "a..b",
                                  "x'y", "`id`", "a\nb", "caf\u00e9", "g++"])
def test_refuses_what_init_would_refuse_naming_it(name):
    with pytest.raises(DroidheapError) as raised:
        check_start_name(name)
    message = str(raised.value)
    assert repr(name) in message and "\n" not in message
    with pytest.raises(DroidheapError):
        start_properties(name)


def test_a_program_is_named_by_its_basename():
    check_start_name(program_name(["/data/local/tmp/prog", "arg"]))
    with pytest.raises(DroidheapError):
        check_start_name(program_name(["/data/local/tmp/p;touch x"]))
