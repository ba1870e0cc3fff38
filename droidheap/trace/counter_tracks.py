"""Reads the figures droidheapd writes beside each dump as Perfetto counter tracks of the process
(ndk_client/daemon/counter_tracks.h): the exact totals of a heap, "<heap>: allocations",
"<heap>: allocated bytes", "<heap>: frees", "<heap>: freed bytes", and what the allocator says it
holds, "mallinfo: in use bytes", "mallinfo: free bytes", "mallinfo: system bytes". A process
attached while running has "<heap>: frees (older blocks too)" and "... freed bytes (older blocks
too)" instead of its frees, which are not read as totals (process_figures.HeapTotals).

On a sequence, a process track (`process.pid`) and its counter tracks (children by parent_uuid)
are described before the dump that uses them (droidheapd describes them at every dump; a
descriptor seen twice is one track). Each dump's values, one TYPE_COUNTER event per counter, come
before its profile packets. A counter that did not arrive is unknown, not 0.

A process's last dump also says how its profile ended, as an instant event on the process track
named "process exited", "process exec'd", "profile ended" (a guardrail), "connection lost" or
"profile cut off" (the process kept droidheapd from reading its buffer in time) (ENDINGS).

With --unreachable, the latest sweep's figures: "unreachable: blocks swept", "unreachable: blocks",
"unreachable: bytes", "unreachable: threads held" (ns), "unreachable: blocks listed" (by the
allocator), and an instant event "unreachable memory: NOTE" when it did not scan everything or did
not run ("not swept: ..."); "mallinfo: not read at exit" when the mallinfo figures of a process
that exited are older than its exit (the read would have taken more than its share of the time).
"""
from typing import Dict, List, Optional, Sequence, Set, Tuple

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from droidheap.trace.process_figures import ENDINGS, AllocatorStats, HeapTotals, UnreachableSweep
from droidheap.trace.reader import as_text

_TOTALS = ("allocations", "allocated bytes", "frees", "freed bytes")
_MALLINFO = ("mallinfo: in use bytes", "mallinfo: free bytes", "mallinfo: system bytes")
_UNREACHABLE = ("unreachable: blocks swept", "unreachable: blocks", "unreachable: bytes",
                "unreachable: threads held")
_LISTED = "unreachable: blocks listed"
_UNREACHABLE_NOTE = "unreachable memory: "
_MALLINFO_NOT_READ_AT_EXIT = "mallinfo: not read at exit"
_NOT_SWEPT = "not swept: "


class CounterTracks:
    """The counter tracks of one trusted packet sequence and the values read since its last finished
    dump; owned by rebuild_dumps, one per sequence."""

    def __init__(self):
        self._pids: Dict[int, int] = {}  # process track uuid -> pid
        self._counters: Dict[int, Tuple[int, str]] = {}  # counter track uuid -> (parent, name)
        self._values: Dict[int, Dict[str, int]] = {}  # pid -> counter name -> value
        self._endings: Dict[int, str] = {}  # pid -> one of ENDINGS
        self._unreachable_notes: Dict[int, str] = {}  # pid -> the sweep's note
        self._mallinfo_not_read_at_exit: Set[int] = set()  # pids

    def add_descriptor(self, track: pb.TrackDescriptor) -> None:
        if track.HasField("process"):
            self._pids[track.uuid] = track.process.pid
        elif track.HasField("counter"):
            self._counters[track.uuid] = (track.parent_uuid, as_text(track.name))

    def add_event(self, event: pb.TrackEvent) -> None:
        if event.type == pb.TrackEvent.TYPE_INSTANT and event.track_uuid in self._pids:
            pid = self._pids[event.track_uuid]
            if event.name in ENDINGS:
                self._endings[pid] = event.name
            elif event.name == _MALLINFO_NOT_READ_AT_EXIT:
                self._mallinfo_not_read_at_exit.add(pid)
            elif event.name.startswith(_UNREACHABLE_NOTE):
                self._unreachable_notes[pid] = event.name[len(_UNREACHABLE_NOTE):]
        if event.type != pb.TrackEvent.TYPE_COUNTER or not event.HasField("counter_value"):
            return
        parent, name = self._counters.get(event.track_uuid, (0, ""))
        # The parent is looked up now, not when the counter was described: Perfetto lets a child
        # be described before its parent.
        if parent in self._pids:
            self._values.setdefault(self._pids[parent], {})[name] = event.counter_value

    def totals(self, pid: int, heap: str) -> Optional[HeapTotals]:
        figures = self._figures(pid, [f"{heap}: {name}" for name in _TOTALS])
        return HeapTotals(*figures) if figures else None

    def allocator(self, pid: int) -> Optional[AllocatorStats]:
        figures = self._figures(pid, _MALLINFO)
        return AllocatorStats(*figures, pid in self._mallinfo_not_read_at_exit) if figures else None

    def unreachable(self, pid: int) -> Optional[UnreachableSweep]:
        """The latest sweep's figures at this dump; None when the process was not swept."""
        figures = self._figures(pid, _UNREACHABLE)
        note = self._unreachable_notes.get(pid, "")
        if figures:
            return UnreachableSweep(True, *figures, note=note,
                                    listed_blocks=self._values[pid].get(_LISTED, 0))
        return UnreachableSweep(False, note=note[len(_NOT_SWEPT):]) if note.startswith(
            _NOT_SWEPT) else None

    def ending(self, pid: int) -> str:
        """How the process's profile ended, said by its last dump; "" in any other dump."""
        return self._endings.get(pid, "")

    def dump_finished(self) -> None:
        self._values.clear()
        self._endings.clear()
        self._unreachable_notes.clear()
        self._mallinfo_not_read_at_exit.clear()

    def _figures(self, pid: int, names: Sequence[str]) -> Optional[List[int]]:
        """The values of all `names`, or None unless every one arrived."""
        values = self._values.get(pid, {})
        return [values[n] for n in names] if all(n in values for n in names) else None
