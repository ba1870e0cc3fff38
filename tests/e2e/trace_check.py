"""Reads a raw droidheap trace with perfetto_trace_pb2 and totals the last dump of each process
by leaf function, naming functions with `nm` — independent of droidheap's own symbolizer; and has
Perfetto's own trace processor read the outputs (assert_trace_processor_agrees)."""
import collections
import gzip
import pathlib
import re
import subprocess
import time
from typing import Dict, List, Tuple

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from droidheap.pprof import Profile
from tests.trace_processor import LoadedTrace, SiteTotals, sum_totals, totals_by_site_in_pprof

_CLOCK_MONOTONIC_COARSE = 6  # Linux's id; Python's time module does not name it


def _symbols(binary: pathlib.Path) -> List[Tuple[int, int, str]]:
    out = subprocess.run(["nm", "-S", "--defined-only", str(binary)], capture_output=True,
                         text=True, check=True).stdout
    symbols = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            symbols.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
    return symbols


def _function_at(symbols, rel_pc: int) -> str:
    for start, size, name in symbols:
        if start <= rel_pc < start + size:
            return name
    return "?"


def read_dumps(trace: pathlib.Path):
    """Returns {pid: [list of dumps]}, each dump a list of (frames root first, HeapSample);
    frames are (mapping path, rel_pc)."""
    packets = pb.Trace.FromString(trace.read_bytes()).packet
    strings: Dict[int, str] = {}
    mappings: Dict[int, str] = {}
    frames: Dict[int, Tuple[int, int]] = {}
    callstacks: Dict[int, List[int]] = {}
    dumps = collections.defaultdict(list)
    current: Dict[int, list] = {}
    for packet in packets:
        # Android 10's heapprofd writes them in its profile packets; droidheapd and later
        # heapprofds as interned data.
        for data, paths in ((packet.interned_data, packet.interned_data.mapping_paths),
                            (packet.profile_packet, packet.profile_packet.strings)):
            for s in paths:
                strings[s.iid] = s.str.decode(errors="replace")  # build ids among them
            for m in data.mappings:
                # As the trace processor joins them: "/" before each component.
                path = "".join("/" + strings.get(i, "") for i in m.path_string_ids)
                mappings[m.iid] = path[1:] if path.startswith("//") else path
            for f in data.frames:
                frames[f.iid] = (f.mapping_id, f.rel_pc)
            for c in data.callstacks:
                callstacks[c.iid] = list(c.frame_ids)
        if packet.HasField("profile_packet"):
            for process in packet.profile_packet.process_dumps:
                rows = current.setdefault(process.pid, [])
                for sample in process.samples:
                    stack = [(mappings[frames[f][0]], frames[f][1])
                             for f in callstacks[sample.callstack_id]]
                    rows.append((stack, sample))
            if not packet.profile_packet.continued:
                for pid, rows in current.items():
                    dumps[pid].append(rows)
                current = {}
    return dumps


def totals_by_leaf_function(trace: pathlib.Path, binary: pathlib.Path,
                            prefix: str = "") -> Dict[int, Dict[str, SiteTotals]]:
    """{pid: {leaf function in `binary`: totals of the last dump}}: the innermost frame in `binary`
    whose function name starts with `prefix`; stacks without one are filed under '?'."""
    symbols = _symbols(binary)
    result = {}
    for pid, dumps in read_dumps(trace).items():
        per_function = collections.defaultdict(SiteTotals)
        for stack, sample in dumps[-1]:
            name = "?"
            for path, rel_pc in reversed(stack):
                if path.endswith("/" + binary.name):
                    function = _function_at(symbols, rel_pc - 1)
                    if function.startswith(prefix):
                        name = function
                        break
            t = per_function[name]
            t.allocated += sample.self_allocated
            t.freed += sample.self_freed
            t.alloc_count += sample.alloc_count
            t.free_count += sample.free_count
        result[pid] = dict(per_function)
    return result


def function_frames(trace: pathlib.Path, binary: pathlib.Path):
    """{pid: [stack of the last dump, innermost first, as function names]}: frames in `binary` by
    name, others by their mapping path."""
    symbols = _symbols(binary)
    return {pid: [[_function_at(symbols, rel_pc - 1) if path.endswith("/" + binary.name) else path
                   for path, rel_pc in reversed(stack)] for stack, _ in dumps[-1]]
            for pid, dumps in read_dumps(trace).items()}


def last_pprof_of(out: pathlib.Path, pid: int):
    files = {int(f.name.split(".")[1]): f for f in out.glob(f"heap_dump.*.{pid}.*.pb.gz")}
    assert files, f"no pprof file for pid {pid} in {sorted(out.iterdir())}"
    return Profile.FromString(gzip.decompress(files[max(files)].read_bytes()))


def _execd_pids(packets, daemon_log: str) -> set:
    """Pids profiled twice in a trace: described again (they exec'd another program while
    profiled), or connected twice as droidheapd's log says (a shell whose client connected, then
    the program it exec'd, under the same command line when the daemon read it after the
    exec)."""
    described = collections.Counter(p.pid for packet in packets
                                    for p in packet.process_tree.processes)
    connected = collections.Counter(re.findall(r"droidheapd: connected pid=(\d+)", daemon_log))
    return {pid for pid, count in described.items() if count > 1} | \
        {int(pid) for pid, count in connected.items() if count > 1}


def assert_trace_processor_agrees(out: pathlib.Path, program: pathlib.Path, prefix: str = "site_",
                                  allowed: Tuple[str, ...] = (), at_peak: bool = False,
                                  process_name: str = ""):
    """Both traces in OUT load in Perfetto's trace processor without an import error or data
    loss (but the stats named in `allowed`), with every dump placed inside the trace; in the
    symbolized one the process is named, the program's frames are symbolized, and each site
    holds what the last pprof file of its process holds. The raw trace books the same bytes
    (unnamed). With `at_peak` (heapprofd's dump_at_max) only the bytes in use compare: the trace
    processor reads a peak as allocated and never freed, droidheap's pprof as in use only.
    The process is named `process_name` (default: the program's file name).

    A process that exec'd while profiled (a shell running the program) has both programs' stacks
    booked under its pid by the trace processor, the pprof only the last one's: only sites
    compare there."""
    processes = {}
    for name in ("raw-trace", "symbolized-trace"):
        with LoadedTrace(out / name) as trace:
            problems = [p for p in trace.problems() if p[0] not in allowed]
            assert problems == [], (name, problems)
            assert trace.allocation_count() > 0, name
            # Dumps land between the session's first and last packets (BOOTTIME, written when
            # the daemon started and when it wrote its last dump), give or take a tick of
            # MONOTONIC_COARSE, the dumps' own clock: converting through a snapshot read a tick
            # earlier or later is off by less than one.
            packets = pb.Trace.FromString((out / name).read_bytes()).packet
            stamps = [p.timestamp for p in packets]
            tick = 2 * int(time.clock_getres(_CLOCK_MONOTONIC_COARSE) * 1e9)
            assert all(min(stamps) - tick <= t <= max(stamps) + tick
                       for t in trace.dump_times()), (name, trace.dump_times(), min(stamps),
                                                      max(stamps))
            per_site = trace.totals_by_site(prefix)
            processes[name] = {pid: sum_totals(sites.values()) for pid, sites in per_site.items()}
            if name != "symbolized-trace":
                continue
            names = trace.process_names()
            assert trace.unsymbolized_frames("/" + program.name) == 0
            log = out / "droidheapd.log"
            execd = _execd_pids(packets, log.read_text() if log.is_file() else "")
            for pid, sites in per_site.items():
                if set(sites) != {"?"}:  # the program's (--all profiles others beside it)
                    assert (process_name or program.name) in names.get(pid, ""), names
                in_pprof = totals_by_site_in_pprof(last_pprof_of(out, pid), prefix)
                if pid in execd:
                    sites, in_pprof = ({k: v for k, v in d.items() if k != "?"}
                                       for d in (sites, in_pprof))
                if at_peak:
                    sites, in_pprof = ({k: v.in_use for k, v in d.items()}
                                       for d in (sites, in_pprof))
                assert sites == in_pprof, pid
    assert processes["raw-trace"] == processes["symbolized-trace"]
