"""The names that become bionic's start property, heapprofd.enable.<name>: accepted as Android's
init accepts property names, everything else refused in one line before any reaches a device."""
import pytest

from droidheap.device.names import program_name
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


def test_a_refusal_says_what_would_profile_the_program_instead():
    with pytest.raises(DroidheapError) as raised:
        check_start_name("g++", "--mode preload starts it")
    assert str(raised.value).startswith("'g++' cannot be profiled from its start: ")
    assert str(raised.value).endswith("; --mode preload starts it")


def test_a_program_is_named_by_its_basename():
    check_start_name(program_name(["/data/local/tmp/prog", "arg"]))
    with pytest.raises(DroidheapError):
        check_start_name(program_name(["/data/local/tmp/p;touch x"]))


def test_a_pattern_is_told_from_a_name_and_matches_names_whole():
    from droidheap.device.names import is_pattern, matching_pids
    assert [is_pattern(n) for n in ("com.example.*", "app?", "app[12]", "com.example.app")] == \
        [True, True, True, False]
    names = {1: "init", 7: "com.example.app", 8: "com.example.app:remote", 9: "com.other"}
    assert matching_pids("com.example.*", names) == [7, 8]
    assert matching_pids("com.example.app", names) == [7]  # whole names, not prefixes
    assert matching_pids("COM.example.*", names) == []  # case counts, as pidof's does
    for bad in ("com.example.*", "app?"):  # never a start property
        with pytest.raises(DroidheapError):
            check_start_name(bad)
