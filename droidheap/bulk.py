"""Looking up hundreds of thousands of things at once: a large trace has that many samples in
every dump, and a Python loop over them costs seconds where C loops (map, zip, compress over
dicts keyed by identity or by bytes) cost tenths. The pattern: look every one up with map, then
make in Python only what was not found. Better still, as dumps keep their samples in order: compare
a dump with the dump before place by place (changed_places, carried_over), a pointer comparison
each, and look up only what changed."""
import functools
import itertools
import operator
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, TypeVar

T = TypeVar("T")
V = TypeVar("V")

_is_none = functools.partial(operator.is_, None)
_VALUE = operator.itemgetter(1)


def misses(found: List[Optional[T]]) -> Iterator[int]:
    """The indexes of `found` (the results of a map over dict.get) that hold None."""
    if None not in found:  # as a rule all were found: one scan, no call per item
        return iter(())
    return itertools.compress(range(len(found)), map(_is_none, found))


def by_identity(objects: Iterable[T]) -> Dict[int, T]:
    """{id: object} of `objects`, each once, in first-seen order: for objects shared by
    reference (a trace's frames, call stacks and samples), where hashing their contents would
    cost more than all the rest."""
    objects = list(objects)
    return dict(zip(map(id, objects), objects))


def changed_places(now: Sequence[T], before: Sequence[T]) -> List[int]:
    """The indexes of `now` whose object is not `before`'s at the same place (all past its end).
    A dump's samples keep their places from the dump before (the daemon keeps its stacks in
    order), and a sample nothing happened at is the same object: its changes are these few."""
    return list(itertools.compress(range(len(now)), map(operator.is_not, now, before))) + list(
        range(len(before), len(now)))


def keeps_every_place(now: Sequence[T], before: Sequence[T], at: List[int],
                      key: Callable[[T], object]) -> bool:
    """Whether `now`, whose places `at` differ from `before`'s (changed_places), holds at each of
    `before`'s places an object of the same `key` (the very object) as there before: nothing of
    `before`'s keys left out, whatever is new after its end. How a dump that changed figures but
    kept its call stacks in order is told from one that dropped or moved some, in C loops."""
    if len(now) < len(before):
        return False
    replaced = at[:len(at) - (len(now) - len(before))]  # the rest are past before's end
    return all(map(operator.is_, map(key, map(now.__getitem__, replaced)),
                   map(key, map(before.__getitem__, replaced))))


def carried_over(now: Sequence[T], before: Sequence[T], before_values: Sequence[V],
                 make: Callable[[List[T]], List[V]]) -> Tuple[List[V], List[int]]:
    """The value of each of `now`: `before_values`' where `now` holds `before`'s object at the same
    place, `make`'s of the others (asked once, for the list of them); and the places of those
    (changed_places). Walking a dump against the dump before costs a comparison per sample;
    looking each up in a table of a whole trace's samples, a cache miss."""
    at = changed_places(now, before)
    values = list(before_values[:len(now)])
    values += [None] * (len(now) - len(values))
    for i, value in zip(at, make(list(map(now.__getitem__, at)))):
        values[i] = value
    return values, at


def made_once(keys: Sequence[T], table: Dict[int, Tuple[T, V]],
              make: Callable[[T], V]) -> List[V]:
    """The value of each of `keys` in `table`, by the key's identity, made by `make` for the keys
    not there yet. Each entry holds its key alive, so that its id stays the key's."""
    found = list(map(table.get, map(id, keys)))
    for i in misses(found):
        key = keys[i]
        entry = table.get(id(key))  # made for an earlier one of these keys
        if entry is None:
            entry = table[id(key)] = (key, make(key))
        found[i] = entry
    return list(map(_VALUE, found))
