"""The text summary: the sampled estimate, then the exact totals and the allocator's figures when
the trace has them, then what the kernel said; and the last sweep for unreachable memory's
verdict."""
import dataclasses

from droidheap.results.from_trace import profiles_from_dumps
from droidheap.results.model import ProgramExit, StackSample, Unreachable
from droidheap.results.summary import format_summary, summarize
from droidheap.symbolizer import SymbolTable
from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import parse_trace
from fixtures_trace import APP, COARSE_NS, TraceBuilder, heap_counters, mallinfo_counters

MIB = 2**20


def _summaries(b: TraceBuilder):
    dumps = rebuild_dumps(parse_trace(b.to_bytes()).packets)
    return summarize(dumps, profiles_from_dumps(dumps, SymbolTable({})))


def _trace(counters: bool) -> TraceBuilder:
    b = TraceBuilder().process(7, "app").process_stats(7, rss_kb=4096, rss_anon_kb=2048)
    if counters:
        b.counters(7, {**heap_counters(100000, 12 * MIB, 99000, 11 * MIB),
                       **mallinfo_counters(MIB + MIB // 5, 300 * 1024, 2 * MIB)})
    b.dump({7: [(b.callstack([(APP, 0x10)]), 8192, 4096, 2, 1)]})
    return b


def test_exact_totals_and_mallinfo_come_between_the_sampled_line_and_rss():
    lines = format_summary(_summaries(_trace(counters=True))).splitlines()
    assert lines[1:4] == [
        "  sampled, requested sizes: allocated 8.0 KiB in 2 objects, in use at the last dump "
        "4.0 KiB in 1 objects",
        "  exact since profiling began, usable sizes: 100000 allocations (12.0 MiB), 99000 frees "
        "(11.0 MiB); "
        "1000 blocks, 1.0 MiB in use",
        "  the allocator (mallinfo) as last reported: 1.2 MiB in use, 300.0 KiB free, 2.0 MiB "
        "taken from the system",
    ]
    assert lines[4].startswith("  the process: RSS 4.0 MiB")


def test_summary_keeps_the_last_dump_figures_that_arrived():
    b = _trace(counters=True)
    b.dump({7: [(b.callstack([(APP, 0x10)]), 16384, 4096, 4, 1)]})  # no counters this time
    (summary,) = _summaries(b)
    assert summary.totals.alloc_count == 100000 and summary.allocator.system_bytes == 2 * MIB


def test_figures_the_trace_lacks_print_nothing():
    text = format_summary(_summaries(_trace(counters=False)))
    assert "exact since" not in text and "mallinfo" not in text


def test_exact_line_prints_beside_a_peak_too():
    (summary,) = _summaries(_trace(counters=True))
    lines = format_summary([dataclasses.replace(summary, at_peak=True)]).splitlines()
    assert lines[1] == ("  sampled, requested sizes: in use at the peak of the sampled heap "
                        "4.0 KiB in 1 objects")
    assert lines[2].startswith("  exact since profiling began, usable sizes: 100000 allocations")


def _note(text: str) -> str:
    """The note line, without the unwinding error every dump of TraceBuilder has."""
    line = next(line for line in text.splitlines() if line.startswith("  note: "))
    return line.replace("; 1 unwinding error", "")


def test_figures_read_as_the_process_exited_say_so():
    b = _trace(counters=True).ending(7, "process exited")
    b.process_stats(7, rss_kb=20480).dump({7: []}, timestamp=COARSE_NS + 2 * 10**9,
                                             disconnected=True)
    text = format_summary(_summaries(b))
    assert "  the allocator (mallinfo) as it exited: 1.2 MiB in use" in text, text
    assert "  the process as it exited: RSS 20.0 MiB" in text, text
    assert _note(text) == "  note: the process exited"


def test_mallinfo_figures_not_read_at_exit_say_they_are_older():
    # The exit's read would have walked too many free blocks: the figures are the last sent.
    b = _trace(counters=False).ending(7, "process exited").ending(7, "mallinfo: not read at exit")
    b.counters(7, mallinfo_counters(MIB + MIB // 5, 300 * 1024, 2 * MIB))
    b.dump({7: []}, timestamp=COARSE_NS + 2 * 10**9, disconnected=True)
    (summary,) = _summaries(b)
    assert summary.allocator.not_read_at_exit
    assert ("  the allocator (mallinfo) as last reported (not read at exit: too slow): 1.2 MiB "
            "in use") in format_summary([summary])


def test_rss_of_an_earlier_dump_says_which_and_how_long_before_the_last():
    # The process's connection closed without its exit path: its last dump has no RSS.
    b = _trace(counters=False).ending(7, "connection lost")
    b.dump({7: []}, timestamp=COARSE_NS + 2_500_000_000, disconnected=True)
    text = format_summary(_summaries(b))
    assert "  the process at dump 0, 1.5 s before the last: RSS 4.0 MiB" in text, text
    assert _note(text) == ("  note: its connection was lost before the process exited normally "
                           "(a crash, a kill, _exit or a closed socket)")


def test_a_process_still_connected_at_the_last_dump_has_no_ending_and_current_rss():
    text = format_summary(_summaries(_trace(counters=False)))
    assert _note(text) == "  note: 1 unwinding error"
    assert "  the process: RSS 4.0 MiB" in text, text


def _ending_note(ending: str, program_exits=None, **flags) -> str:
    b = TraceBuilder().process(7, "app")
    if ending:
        b.ending(7, ending)
    b.dump({7: []}, disconnected=True, **flags)
    dumps = rebuild_dumps(parse_trace(b.to_bytes()).packets)
    return _note(format_summary(summarize(dumps, profiles_from_dumps(dumps, SymbolTable({})),
                                          program_exits)))


def test_the_note_says_how_the_profile_ended():
    assert _ending_note("process exited", {7: ProgramExit(0)}) == (
        "  note: the process exited with status 0")
    assert _ending_note("connection lost", {7: ProgramExit(137)}) == (
        "  note: signal 9 ended it before droidheap's exit path ran (the process exited with "
        "status 137)")
    assert _ending_note("connection lost", {7: ProgramExit(0)}) == (
        "  note: it exited without droidheap's exit path, as _exit does (the process exited with "
        "status 0)")
    assert _ending_note("process exec'd") == (
        "  note: it exec'd another program, which its profile ends at (the program is profiled "
        "from its start when the session takes it)")
    assert _ending_note("profile ended", buffer_overran=True) == (
        "  note: samples were lost (the buffer overran); its profile ended early")
    # A trace of an older droidheapd, or of heapprofd, says only that it disconnected.
    assert _ending_note("") == "  note: the process exited or its connection was lost"
    assert _ending_note("", {7: ProgramExit(1)}) == "  note: the process exited with status 1"


def test_a_program_droidheap_stopped_is_said_to_be_not_a_lost_connection():
    assert _ending_note("connection lost", {7: ProgramExit(143, "Ctrl-C")}) == (
        "  note: droidheap stopped it at Ctrl-C: the process exited with status 143")
    assert _ending_note("process exited", {7: ProgramExit(0, "SIGTERM")}) == (
        "  note: droidheap stopped it at SIGTERM: the process exited with status 0")


def _swept_summary(sweeps):
    """The summary of two dumps of one call site, the dumps' sweeps `sweeps`."""
    b = _trace(counters=False)
    b.dump({7: [(b.callstack([(APP, 0x10)]), 16384, 4096, 4, 1)]}, timestamp=COARSE_NS + 10**9)
    dumps = rebuild_dumps(parse_trace(b.to_bytes()).packets)
    profiles = profiles_from_dumps(dumps, SymbolTable({}))
    for profile, sweep in zip(profiles, sweeps):
        profile.unreachable = sweep and Unreachable(
            [StackSample(s.stack, 0, 0, 1, 4000) for s in profile.samples
             if sweep.get("swept", True)], **sweep)
    return [line for line in format_summary(summarize(dumps, profiles)).splitlines()
            if "unreachable" in line]


def test_the_summary_gives_the_last_sweeps_verdict_and_top_site():
    exact = dict(complete=True, blocks_swept=161, blocks=90, bytes=4000)
    (line,) = _swept_summary([None, exact])
    assert line.startswith("  unreachable (leaked): 3.9 KiB in 90 blocks, every block known "
                           "(exact); top: "), line
    assert line.endswith(" 3.9 KiB")
    # The last dump not swept: the sweep before it, said to be of that dump.
    (line,) = _swept_summary([dict(blocks_swept=40, blocks=1, bytes=48),
                              dict(swept=False, note="the process had exited")])
    assert line.startswith("  unreachable (leaked) at dump 0: ~3.9 KiB estimated from 1 of 40 "
                           "sampled blocks (blocks not sampled were not judged); top: "), line
    # None swept: why not.
    assert _swept_summary([None, dict(swept=False, note="qemu-user")]) == [
        "  unreachable (leaked): not swept: qemu-user"]
    assert _swept_summary([None, None]) == []


def _ranked(figures) -> str:
    """The summary's call-site table of one dump of two sites, `figures` (allocated, freed) each."""
    b = TraceBuilder().process(7, "app")
    b.dump({7: [(b.callstack([(APP, pc)]), allocated, freed, allocated // 64, freed // 64)
                for pc, (allocated, freed) in zip((0x10, 0x20), figures)]})
    text = format_summary(_summaries(b))
    return text[text.index("  top call sites"):]


def test_call_sites_are_ranked_by_bytes_allocated_when_little_is_in_use():
    # jq's shape: everything freed by the end; ranked by bytes in use there would be no table.
    freed = _ranked([(64 * 1024, 64 * 1024), (640 * 1024, 640 * 1024)])
    assert freed.startswith("  top call sites by bytes allocated (little is in use at the last "
                            "dump: 0 B of 704.0 KiB):"), freed
    assert freed.splitlines()[2].split()[2:4] == ["640.0", "KiB"], freed  # the most allocated
    # sqlite3's: a few KiB kept of what it allocated.
    kept = _ranked([(64 * 1024, 60 * 1024), (640 * 1024, 640 * 1024)])
    assert kept.startswith("  top call sites by bytes allocated"), kept
    assert len(kept.splitlines()) == 4  # the columns' names, both sites
    # Enough in use: ranked by it, the freed site last.
    held = _ranked([(64 * 1024, 0), (640 * 1024, 640 * 1024)])
    assert held.startswith("  top call sites by bytes in use:\n"), held
    assert len(held.splitlines()) == 3, held  # the freed site left out
