"""How fast droidheap symbolizes a real profile, beside llvm-symbolizer on the same addresses:
cold (an empty symbol cache: every ELF and DWARF parsed) and on a repeat run (the cache of what
was parsed, per build id).

    .venv/bin/python bench/symbolize.py [--runs 3]

Profiles, taken here with `droidheap --local -i 1`: python3 building JSON (python3, libc with
its debug file from libc6-dbg, ld.so, libm, libz, ...) and tests/programs/inline_sites.cc built
-O2 -g (libstdc++ and the program's own inline frames). For each, the rel_pcs of every frame of
every mapping are symbolized: llvm-symbolizer once per mapping (one process, every address, the
debug files it finds itself), droidheap in one process. Figures are medians of --runs runs.
"""
import argparse
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from droidheap.symbol_cache import SymbolCache  # noqa: E402
from droidheap.symbolizer import Symbolizer, reached_modules  # noqa: E402
from droidheap.trace.heap_dumps import rebuild_dumps  # noqa: E402
from droidheap.trace.reader import parse_trace  # noqa: E402

PYTHON_WORK = "import json; x = [json.dumps({'a': i, 'b': [i] * 5}) for i in range(20000)]"


def _profile(argv, out: pathlib.Path):
    subprocess.run([sys.executable, "-m", "droidheap.cli", "--local", "-i", "1", "-o", str(out),
                    "--", *argv], check=True, capture_output=True, cwd=ROOT)
    dumps = rebuild_dumps(parse_trace((out / "raw-trace").read_bytes()).packets)
    return {key: sorted(pcs) for key, pcs in reached_modules(dumps).items()
            if pathlib.Path(key[0]).is_file()}


def _llvm(modules) -> float:
    start = time.perf_counter()
    for (path, _), pcs in modules.items():
        subprocess.run(["llvm-symbolizer", f"--obj={path}", "--demangle"]
                       + [hex(max(0, pc - 1)) for pc in pcs], check=True, capture_output=True)
    return time.perf_counter() - start


def _ours(modules, cache_dir: pathlib.Path) -> float:
    start = time.perf_counter()
    # The profiles were taken here: their paths are this machine's files (made_here.py).
    symbolizer = Symbolizer(cache=SymbolCache(cache_dir), host_paths=True)
    for (path, build_id), pcs in modules.items():
        symbolizer.symbolize(path, build_id, pcs)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        program = work / "inline_sites"
        subprocess.run(["g++", "-O2", "-g", str(ROOT / "tests/programs/inline_sites.cc"), "-o",
                        str(program)], check=True)
        profiles = {"python3": _profile(["/usr/bin/python3", "-c", PYTHON_WORK], work / "py"),
                    "C++ inline_sites": _profile([str(program), "2000"], work / "cc")}
        print(f"{'profile':18} {'mappings':>8} {'addresses':>9} {'llvm-symbolizer':>15} "
              f"{'droidheap cold':>14} {'repeat':>8} {'cold/llvm':>9} {'cold/repeat':>11}")
        for name, modules in profiles.items():
            llvm, cold, warm = [], [], []
            for run in range(args.runs):
                cache = work / f"cache-{name}-{run}"
                llvm.append(_llvm(modules))
                cold.append(_ours(modules, cache))
                warm.append(_ours(modules, cache))
            llvm_s, cold_s, warm_s = (statistics.median(v) for v in (llvm, cold, warm))
            addresses = sum(len(pcs) for pcs in modules.values())
            print(f"{name:18} {len(modules):>8} {addresses:>9} {llvm_s:>14.3f}s "
                  f"{cold_s:>13.3f}s {warm_s:>7.3f}s {cold_s / llvm_s:>8.1f}x "
                  f"{cold_s / warm_s:>10.0f}x")


if __name__ == "__main__":
    main()
