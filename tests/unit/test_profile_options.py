"""ProfileOptions as droidheapd's command line: what each of heap_profile's flags adds."""
import pytest

from droidheap.session import ProfileOptions


def _flag_value(args, flag):
    return args[args.index(flag) + 1] if flag in args else None


@pytest.mark.parametrize("options, heaps, all_heaps", [
    (ProfileOptions(), None, False),  # libc.malloc alone: droidheapd's default, nothing to say
    (ProfileOptions(heaps=("pool",)), "pool", False),
    (ProfileOptions(heaps=("libc.malloc", "pool", "arena")), "libc.malloc,pool,arena", False),
    (ProfileOptions(all_heaps=True), None, True),
])
def test_heaps_reach_droidheapd_as_one_comma_list_or_all_heaps(options, heaps, all_heaps):
    args = options.daemon_args()
    assert _flag_value(args, "--heaps") == heaps
    assert ("--all-heaps" in args) == all_heaps
    assert args.count("--heaps") <= 1


def test_heap_flags_leave_the_other_flags_alone():
    plain = ProfileOptions().daemon_args()
    assert ProfileOptions(heaps=("pool",)).daemon_args()[:len(plain)] == plain
    assert ProfileOptions(all_heaps=True).daemon_args()[:len(plain)] == plain
