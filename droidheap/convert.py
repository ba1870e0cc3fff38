"""From the raw trace pulled off the device to the user's outputs: `symbolized-trace` (for
ui.perfetto.dev / trace_processor), one pprof file per process, heap and dump, `report.html` (a
flamegraph page that needs no network) and a text summary.

The one entry point is `convert_trace`, called by the CLI after the trace is pulled.
"""
import dataclasses
import gc
import pathlib
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from droidheap.errors import DroidheapError
from droidheap.gc_pause import collected_apart, gc_paused
from droidheap.made_here import made_here, remember
from droidheap.output_files import BackgroundWrites
from droidheap.progress import progress_bar
from droidheap.pprof import PprofFile, PprofWriter
from droidheap.results.html import REPORT_HTML, write_html
from droidheap.results.leaks import leak_suspects
from droidheap.results.from_trace import profiles_from_dumps
from droidheap.results.load import SYMBOLIZED_TRACE
from droidheap.results.model import ProgramExit, Results
from droidheap.results.page import page_data, page_title
from droidheap.results.store import RESULTS_FILE, write_results
from droidheap.results.summary import ProcessSummary, format_summary, summarize
from droidheap.symbol_cache import SymbolCache
from droidheap.symbolizer import Symbolizer, reached_modules, symbolize_dumps
from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import parse_trace
from droidheap.trace.symbolized import (read_module_symbols, without_module_symbols,
                                        write_symbolized_trace)


@dataclasses.dataclass
class ConversionResult:
    symbolized_trace: pathlib.Path
    html_report: pathlib.Path
    pprof_files: List[PprofFile]  # in (pid, dump index, heap) order
    processes: List[ProcessSummary]  # one per process and heap
    warnings: List[str]
    summary_text: str  # the summary, then one "warning: ..." line per warning

    @property
    def pprof_paths(self) -> List[pathlib.Path]:
        return [f.path for f in self.pprof_files]


@gc_paused
def convert_trace(raw_trace: pathlib.Path, out_dir: pathlib.Path,
                  search_dirs: Sequence[pathlib.Path] = (),
                  fetch_files: Optional[Callable[[List[Tuple[str, str]], List[str]],
                                                 Optional[pathlib.Path]]] = None,
                  process_argvs: Optional[Dict[int, Sequence[str]]] = None,
                  program_exits: Optional[Dict[int, ProgramExit]] = None,
                  made_locally: bool = False,
                  profiled_as: Optional[Sequence[str]] = None) -> ConversionResult:
    """Reads `raw_trace`, symbolizes it with the host's ELF files (and `search_dirs`), and writes
    the outputs into `out_dir` (created if needed). `fetch_files([(device path, build id)],
    warnings)`, when given, is asked for the files found nowhere here (the device's, pulled),
    adds to `warnings` what it could not fetch and returns a directory that mirrors the device's
    paths. `process_argvs` ({pid: argv}) names processes
    the trace leaves unnamed, in the outputs and the symbolized trace; `profiled_as`, the argv of
    every process with dumps that neither the trace nor `process_argvs` names (a session that
    asked the platform's heapprofd for one exact name profiles only processes of that name, some
    too short-lived for the caller to have seen them run); `program_exits`
    ({pid: ProgramExit}) says how the programs the caller started ended. `made_locally`: the local
    device made the trace just now; its paths, and those of a trace made_here remembers, are this
    machine's files, and the trace and its symbolized one are remembered so. Raises DroidheapError
    when the trace cannot be read at all;
    damage after the first good packet only adds warnings, and a trace too large for this
    machine's memory is one error too (the trace itself is kept)."""
    try:
        return _convert(raw_trace, out_dir, search_dirs, fetch_files, process_argvs or {},
                        program_exits, made_locally, profiled_as)
    except MemoryError:
        raise DroidheapError(f"not enough memory to convert {raw_trace}: it is kept; convert it "
                             "where there is more with droidheap symbolize") from None


def _convert(raw_trace, out_dir, search_dirs, fetch_files, process_argvs, program_exits,
             made_locally, profiled_as):
    try:
        data = pathlib.Path(raw_trace).read_bytes()
    except OSError as e:
        raise DroidheapError(f"cannot read the trace {raw_trace}: {e.strerror or e}") from e
    contents = parse_trace(data)
    if not contents.packets:
        what = "is empty" if not data else "holds no readable Perfetto packet"
        raise DroidheapError(f"the trace {raw_trace} {what}; the daemon may have failed before "
                             "its first dump")
    dumps = rebuild_dumps(contents.packets)
    trace_warnings = contents.warnings + dumps.warnings  # what reading the trace again would say
    # A trace symbolized before (by us, or by Perfetto's traceconv) keeps what it said of the
    # mappings this machine cannot symbolize.
    earlier = read_module_symbols(contents.packets)
    contents.packets.clear()  # several times the trace's size; all that is needed is read
    warnings = list(trace_warnings)
    # What the caller knows of processes the trace leaves unnamed (a program it started).
    if profiled_as:
        process_argvs = {**{pid: profiled_as for pid in dumps.dumps}, **process_argvs}
    unnamed = {pid: argv for pid, argv in process_argvs.items()
               if pid not in dumps.cmdlines}
    dumps.cmdlines.update({pid: " ".join(argv) for pid, argv in unnamed.items()})

    host_paths = made_locally or made_here(data)
    with collected_apart():
        symbolizer = Symbolizer(search_dirs, cache=SymbolCache(), host_paths=host_paths)
        if fetch_files is not None:
            missing = sorted(key for key in reached_modules(dumps)
                             if symbolizer.find_elf(*key) is None)
            fetched = fetch_files(missing, warnings) if missing else None
            if fetched is not None:
                # Looked for again below, the device's copies first: what this probe said is
                # moot.
                symbolizer.warnings.clear()
                symbolizer.add_device_files(fetched)
        symbols = symbolize_dumps(dumps, symbolizer)
        for key, module in symbols.modules.items():
            if not module.lines and earlier.get(key, module).lines:
                symbols.modules[key] = earlier[key]
        warnings += symbolizer.warnings
        # What read the ELF and DWARF files (pyelftools' parsed entries, cyclic) is done with:
        # freed now, not held while the outputs are made.
        del symbolizer
        gc.collect()
    # Once per mapping, with the reason; where a better file would help, how to give one.
    unfound = 0
    for module in sorted(symbols.modules.values(), key=lambda m: m.path):
        if not module.lines:
            hint = "" if module.elf else " (give a directory of unstripped files with --symbols DIR)"
            warnings.append(f"{module.path} not symbolized: {module.unsymbolized_reason}{hint}")
            unfound += not module.elf
        elif module.unnamed:
            # Static functions of a stripped file: named by nothing short of its debug file.
            total = module.unnamed + len(module.lines)
            warnings.append(f"{module.path} partly symbolized: {module.unnamed} of {total} "
                            "addresses are in functions its symbol tables do not name (give its "
                            "unstripped file or debug file with --symbols DIR)")
    if unfound and not host_paths and fetch_files is None:
        warnings.append(f"{raw_trace} was not made on this machine: the files it names were not "
                        "looked for at their paths here (give their directories with --symbols)")

    out_dir = pathlib.Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with BackgroundWrites() as files:
            symbolized = out_dir / SYMBOLIZED_TRACE
            raw = data[:contents.intact_length]
            write_symbolized_trace(without_module_symbols(raw) if earlier else raw,
                                   symbols.modules.values(), symbolized, unnamed)
            every_dump = [dump for pid in sorted(dumps.dumps) for dump in dumps.dumps[pid]]
            pprofs, writer = [], PprofWriter(symbols)
            with progress_bar("writing pprof files", len(every_dump)) as bar:
                for dump in every_dump:
                    pprofs.append(writer.write(dump, out_dir, dumps.cmdlines.get(dump.pid, ""),
                                               dumps.wall_time_ns(dump.timestamp),
                                               files.write_gzip))
                    bar.update(1)
            profiles = profiles_from_dumps(dumps, symbols, str(symbolized), consume=True)
            # Before the page: the results' compression (on the writes' thread) goes on while
            # the page is made, rather than after everything else.
            write_results(Results(profiles, trace_warnings), out_dir / RESULTS_FILE,
                          files.write_gzip)
            suspects = leak_suspects(profiles)
            write_html(page_data(profiles, page_title(profiles, str(raw_trace)),
                                 suspects=suspects), out_dir / REPORT_HTML)
    except OSError as e:
        raise DroidheapError(f"cannot write the outputs to {out_dir}: {e}") from e
    if host_paths:  # a conversion of a trace made here is one too
        remember([data, symbolized.read_bytes()])
    processes = summarize(dumps, profiles, program_exits)
    summary = format_summary(processes, suspects[:5])
    if warnings:
        summary += "\n" + "\n".join(f"warning: {w}" for w in warnings)
    return ConversionResult(symbolized, out_dir / REPORT_HTML, pprofs, processes, warnings, summary)
