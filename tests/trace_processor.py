"""Perfetto's own trace processor -- the engine behind ui.perfetto.dev -- as the judge of the traces
droidheap writes: a trace it cannot import is a trace our users cannot open.

scripts/install_test_tools unpacks it from ../shared/tools into .venv/bin; DROIDHEAP_TRACE_PROCESSOR names
another binary. Without one, the checks are skipped with a one-line reason, except in CI (CI set),
which always has it: there a missing binary fails.
"""
import collections
import dataclasses
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
from typing import Dict, Iterable, List, Optional, Tuple

from perfetto.trace_processor import TraceProcessor

from tests.requirements import require

BINARY_NAME = "trace_processor_shell"


def binary() -> Optional[pathlib.Path]:
    named = os.environ.get("DROIDHEAP_TRACE_PROCESSOR")
    path = pathlib.Path(named) if named else pathlib.Path(sys.prefix) / "bin" / BINARY_NAME
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _cpu_lacks_avx2() -> bool:
    try:
        return " avx2" not in pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def require_binary() -> pathlib.Path:
    """The trace processor's path, or the test is skipped (failed in CI) saying why not."""
    path = binary()
    reason = None
    if path is None:
        reason = (f"no {BINARY_NAME}: scripts/install_test_tools unpacks it when ../shared/tools is there "
                  "(or set DROIDHEAP_TRACE_PROCESSOR)")
    elif _cpu_lacks_avx2():
        reason = f"{BINARY_NAME} needs a CPU with AVX2"
    require(reason)
    return path


class _Server:
    """The trace processor's HTTP server (`-D`), on a free port of this machine. Started here, not
    by the Python API, whose start asks whether it listens once a second: a second a trace, a
    hundred in a run of the suite; here it is asked every 10 ms."""

    START_TIMEOUT_S = 60

    def __init__(self, binary: pathlib.Path):
        # What it says goes to a file: a pipe nobody reads would stop it once full.
        self._log = tempfile.TemporaryFile()
        for _ in range(3):  # another process may take the free port before the server binds it
            port = _free_port()
            self._process = subprocess.Popen(
                [str(binary), "-D", "--http-port", str(port), "--no-ftrace-raw"],
                stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log)
            if self._listens(port):
                self.address = f"127.0.0.1:{port}"
                return
            self._process.kill()
            self._process.wait()
        self._log.seek(0)
        said = self._log.read().decode(errors="replace")[-2000:]
        self._log.close()
        raise AssertionError(f"{binary} did not start its HTTP server: {said}")

    def _listens(self, port: int) -> bool:
        deadline = time.monotonic() + self.START_TIMEOUT_S
        while self._process.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                time.sleep(0.01)
        return False

    def stop(self) -> None:
        self._process.kill()
        self._process.wait()
        self._log.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclasses.dataclass
class SiteTotals:
    """Bytes and objects a call site allocated and freed, cumulative as of one dump (in the trace
    processor: its rows of a process summed over all dumps, which add up to the last one)."""
    allocated: int = 0
    freed: int = 0
    alloc_count: int = 0
    free_count: int = 0

    @property
    def in_use(self) -> int:
        return self.allocated - self.freed


class LoadedTrace:
    """One trace loaded into the trace processor; close() (or `with`) ends its process."""

    def __init__(self, trace: pathlib.Path):
        self._server = _Server(require_binary())
        try:
            self.tp = TraceProcessor(trace=str(trace), addr=self._server.address)
        except BaseException:
            self._server.stop()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        try:
            self.tp.close()
        finally:
            self._server.stop()

    def rows(self, sql: str) -> List[dict]:
        return [dict(row.__dict__) for row in self.tp.query(sql)]

    def problems(self) -> List[Tuple[str, Optional[int], str, int]]:
        """(name, index, severity, value) of each import error or data loss the trace caused."""
        return [(r["name"], r["idx"], r["severity"], r["value"])
                for r in self.rows("select name, idx, severity, value from stats "
                                   "where value > 0 and severity in ('error', 'data_loss')")]

    def process_names(self) -> Dict[int, str]:
        return {r["pid"]: r["name"] for r in self.rows("select pid, name from process where pid > 0")}

    def allocation_count(self) -> int:
        return self.rows("select count(*) as n from heap_profile_allocation")[0]["n"]

    def dump_times(self) -> List[int]:
        """When the dumps happened, on the trace's clock (as the UI places them)."""
        return [r["ts"] for r in self.rows("select distinct ts from heap_profile_allocation "
                                           "order by ts")]

    def _frame_names(self) -> Dict[int, List[str]]:
        """Per frame id: the functions ModuleSymbols gave it (several when inlined), else the
        frame's own name, else nothing."""
        names = collections.defaultdict(list)
        for r in self.rows("select f.id, f.name as frame_name, s.name as symbol from "
                           "stack_profile_frame f left join stack_profile_symbol s "
                           "using (symbol_set_id) order by f.id, s.id"):
            if r["symbol"]:
                names[r["id"]].append(r["symbol"])
            elif r["frame_name"]:
                names[r["id"]].append(r["frame_name"])
        return names

    def unsymbolized_frames(self, mapping_suffix: str) -> int:
        """Frames in mappings whose name ends with `mapping_suffix` that no symbol names."""
        return self.rows(
            "select count(*) as n from stack_profile_frame f join stack_profile_mapping m "
            f"on f.mapping = m.id where m.name like '%{mapping_suffix}' and f.symbol_set_id is null"
        )[0]["n"]

    def totals_by_site(self, prefix: str) -> Dict[int, Dict[str, SiteTotals]]:
        """{pid: {site: totals}}: each allocation row is filed under the innermost function of its
        call stack whose name starts with `prefix` ('?' when none does). The trace processor turns
        heapprofd's cumulative dumps into deltas, so the rows of a process add up to its last dump:
        positive sizes are bytes allocated, negative ones bytes freed."""
        frames = self._frame_names()
        callsites = {r["id"]: (r["parent_id"], r["frame_id"])
                     for r in self.rows("select id, parent_id, frame_id from stack_profile_callsite")}
        site_of: Dict[int, str] = {}

        def site(callsite_id: Optional[int]) -> str:
            while callsite_id is not None:
                parent, frame = callsites[callsite_id]
                for name in frames.get(frame, ()):
                    if name.startswith(prefix):
                        return name
                callsite_id = parent
            return "?"

        result: Dict[int, Dict[str, SiteTotals]] = collections.defaultdict(
            lambda: collections.defaultdict(SiteTotals))
        for r in self.rows("select p.pid, a.callsite_id, a.count, a.size from "
                           "heap_profile_allocation a join process p using (upid)"):
            if r["callsite_id"] not in site_of:
                site_of[r["callsite_id"]] = site(r["callsite_id"])
            totals = result[r["pid"]][site_of[r["callsite_id"]]]
            if r["size"] > 0 or r["count"] > 0:
                totals.allocated += r["size"]
                totals.alloc_count += r["count"]
            else:
                totals.freed -= r["size"]
                totals.free_count -= r["count"]
        return {pid: dict(sites) for pid, sites in result.items()}


def totals_by_site_in_pprof(profile, prefix: str) -> Dict[str, SiteTotals]:
    """The same filing for a pprof Profile (sample values alloc_objects, alloc_space,
    inuse_objects, inuse_space, as droidheap writes them)."""
    strings = profile.string_table
    types = [strings[t.type] for t in profile.sample_type]
    functions = {f.id: strings[f.name] for f in profile.function}
    locations = {loc.id: [functions[line.function_id] for line in loc.line]
                 for loc in profile.location}
    result: Dict[str, SiteTotals] = collections.defaultdict(SiteTotals)
    for sample in profile.sample:
        values = dict(zip(types, sample.value))
        site = next((name for loc in sample.location_id for name in locations[loc]
                     if name.startswith(prefix)), "?")
        t = result[site]
        t.allocated += values["alloc_space"]
        t.freed += values["alloc_space"] - values["inuse_space"]
        t.alloc_count += values["alloc_objects"]
        t.free_count += values["alloc_objects"] - values["inuse_objects"]
    return dict(result)


def sum_totals(per_site: Iterable[SiteTotals]) -> SiteTotals:
    total = SiteTotals()
    for t in per_site:
        total.allocated += t.allocated
        total.freed += t.freed
        total.alloc_count += t.alloc_count
        total.free_count += t.free_count
    return total
