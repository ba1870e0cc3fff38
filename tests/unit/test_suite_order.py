"""The suite's shuffled order (tests/conftest.py, --shuffle): drawn from the seed alone, so that
every pytest-xdist worker collects the same order and a run's order can be repeated; each
module's tests stay together (its fixtures, such as a test device, are made once)."""
import pathlib
from dataclasses import dataclass
from random import Random

from tests.conftest import _shuffled


@dataclass
class _Item:
    path: pathlib.Path
    nodeid: str


def _items():
    return [_Item(pathlib.Path(f"tests/m{m}.py"), f"m{m}::t{t}") for m in range(6) for t in range(5)]


def _names(items):
    return [item.nodeid for item in items]


def test_the_same_seed_gives_the_same_order_whatever_the_collection_order():
    items = _items()
    assert _names(_shuffled(items, Random(7))) == _names(_shuffled(items[::-1], Random(7)))
    assert _names(_shuffled(items, Random(7))) != _names(_shuffled(items, Random(8)))


def test_a_modules_tests_stay_together_in_a_new_order():
    order = _shuffled(_items(), Random(3))
    modules = [item.path for item in order]
    runs = [path for i, path in enumerate(modules) if i == 0 or path != modules[i - 1]]
    assert len(runs) == 6 and sorted(order, key=lambda item: item.nodeid) != order


def test_the_device_group_starts_then_what_it_uses_then_the_long_modules_then_the_rest():
    import types
    from tests.conftest import THIS_MACHINES_PROCESSES, _start_order

    class _Test:
        def __init__(self, device=False, **module_flags):
            self.module = types.SimpleNamespace(**module_flags)
            self.device = device

        def get_closest_marker(self, name):
            return THIS_MACHINES_PROCESSES.mark if self.device else None

    tests = [_Test(), _Test(RUNS_LONG=True), _Test(MADE_EARLY=True),
             _Test(device=True, USES_MADE_EARLY=True), _Test(device=True)]
    assert [_start_order(t)[0] for t in tests] == [3, 2, 1, 0, 0]
    # Within the device group, what uses a MADE_EARLY module's work comes after the rest.
    assert sorted(tests, key=_start_order) == tests[::-1]
