#!/usr/bin/env python3
"""How often the daemon's unwinder books the same stack as an in-process reference unwinder.

For each ABI (x86_64 natively, arm64-v8a under qemu-user) this builds
  * a test build of the native tree with -DDROIDHEAP_REFERENCE_UNWIND=ON, whose client also
    unwinds every sampled allocation in process with libgcc's _Unwind_Backtrace and writes
    "<pid> <seq> <pc>..." to $DROIDHEAP_REFERENCE_STACKS (plus its maps to <that>.maps.<pid>);
    the daemon and the emulated libc come from the same build;
  * the programs in bench/programs/ (-O2 -fomit-frame-pointer -g),
then profiles each program with `droidheap --local -i 1` and with $DROIDHEAP_STACK_LOG set, so the
daemon writes "<pid> <seq> <pc>... [!<error>]" for every stack it booked (the profiler's own
leading frames already dropped). Lines are matched by (pid, seq); the reference loses its leading
frames in heapprofd_client.so / libdroidheap_libc.so and the two stacks must then be equal, pc for
pc and with no unwinding error.

    python bench/unwind_agreement.py [--abi x86_64|arm64-v8a|all] [-i INTERVAL] [--no-build]

Prints per program and ABI the stacks compared, how many are equal and a few symbolized examples
of the others. Exits 1 when any program on any ABI is below --threshold (default 99%).
"""
import argparse
import bisect
import collections
import os
import pathlib
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROGRAMS_DIR = ROOT / "bench" / "programs"
BUILD_ROOT = ROOT / "build" / "bench-ref"
PROFILER_LIBRARIES = {"heapprofd_client.so", "libdroidheap_libc.so"}
ABIS = ("x86_64", "arm64-v8a")
TOOLCHAINS = {
    "x86_64": {"cc": "gcc", "cxx": "g++", "addr2line": "addr2line", "cmake": []},
    "arm64-v8a": {"cc": "aarch64-linux-gnu-gcc", "cxx": "aarch64-linux-gnu-g++",
                  "addr2line": "aarch64-linux-gnu-addr2line",
                  "cmake": [f"-DCMAKE_TOOLCHAIN_FILE={ROOT}/ndk_client/cmake/aarch64-linux-gnu.cmake"]},
}
# ndk_client/include: droidheap/heaps.h, which malloc_churn reports its custom heap through.
PROGRAM_FLAGS = ["-O2", "-fomit-frame-pointer", "-g", "-pthread", f"-I{ROOT}/ndk_client/include"]
UNWIND_ERRORS = {1: "memory invalid", 2: "max frames", 3: "bad frame chain", 4: "no unwind info",
                 5: "invalid CFI", 6: "invalid pc"}


def log(message):
    print(message, file=sys.stderr, flush=True)


def run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-4000:] + result.stderr[-4000:])
        raise SystemExit(f"failed ({result.returncode}): {' '.join(map(str, command))}")
    return result


# Building -----------------------------------------------------------------------------------

def build_reference(abi, jobs):
    """The reference-unwind test build; returns the directory to use as DROIDHEAP_BIN_DIR."""
    build = BUILD_ROOT / abi / "native"
    run(["cmake", "-S", ROOT / "ndk_client", "-B", build, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
         "-DDROIDHEAP_REFERENCE_UNWIND=ON", *TOOLCHAINS[abi]["cmake"]])
    run(["cmake", "--build", build, "-j", str(jobs)])  # everything `cmake --install` installs
    install = BUILD_ROOT / abi / "install"
    run(["cmake", "--install", build, "--prefix", install])
    bin_dir = install / "droidheap" / "bin"
    for name in ("droidheapd", "heapprofd_client.so", "libdroidheap_libc.so"):
        if not (bin_dir / "linux" / abi / name).is_file():
            raise SystemExit(f"the reference build has no {bin_dir / 'linux' / abi / name}")
    return bin_dir


def build_programs(abi, names):
    out = BUILD_ROOT / abi / "programs"
    out.mkdir(parents=True, exist_ok=True)
    built = {}
    for source in sorted(PROGRAMS_DIR.iterdir()):
        if source.suffix not in (".c", ".cc") or (names and source.stem not in names):
            continue
        compiler = TOOLCHAINS[abi]["cc" if source.suffix == ".c" else "cxx"]
        if shutil.which(compiler) is None:
            raise SystemExit(f"{compiler} is not installed")
        binary = out / source.stem
        run([compiler, *PROGRAM_FLAGS, "-o", binary, source])
        built[source.stem] = binary
    return built


# Reading the two logs -----------------------------------------------------------------------

def read_stacks(path):
    """{(pid, seq): (pcs, error)} from '<pid> <seq> <hex pc>... [!<n>]' lines."""
    stacks = {}
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return stacks
    for line in text.splitlines():
        words = line.split()
        if len(words) < 2 or not line.endswith(words[-1]):
            continue
        error = 0
        if words[-1].startswith("!"):
            try:
                error = int(words.pop()[1:])
            except ValueError:
                continue
        try:
            key = (int(words[0]), int(words[1]))
            pcs = tuple(int(w, 16) for w in words[2:])
        except ValueError:
            continue  # a line cut short by a killed process
        stacks[key] = (pcs, error)
    return stacks


class Maps:
    """One process's /proc/pid/maps, as the reference client copied it."""

    def __init__(self, text):
        self.entries = []  # (start, end, offset, path)
        for line in text.splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) < 5:
                continue
            start, end = (int(x, 16) for x in parts[0].split("-"))
            path = parts[5] if len(parts) == 6 else ""
            self.entries.append((start, end, int(parts[2], 16), path))
        self.entries.sort()
        self.starts = [e[0] for e in self.entries]

    def find(self, pc):
        i = bisect.bisect_right(self.starts, pc) - 1
        if i >= 0 and pc < self.entries[i][1]:
            return self.entries[i]
        return None

    def is_profiler(self, pc):
        entry = self.find(pc)
        return entry is not None and os.path.basename(entry[3]) in PROFILER_LIBRARIES


def drop_profiler_frames(pcs, maps):
    i = 0
    while i < len(pcs) and maps is not None and maps.is_profiler(pcs[i]):
        i += 1
    return pcs[i:]


# Symbolization (for the examples) -----------------------------------------------------------

class Symbolizer:
    def __init__(self, abi):
        self.addr2line = TOOLCHAINS[abi]["addr2line"]
        self.sysroot = "/usr/aarch64-linux-gnu" if abi == "arm64-v8a" else ""
        self.cache = {}
        self.bias_cache = {}

    def _file(self, path):
        for candidate in (path, self.sysroot + path if self.sysroot else None):
            if candidate and os.path.isfile(candidate):
                return candidate
        return None

    def _vaddr(self, path, file_offset):
        """The ELF address at a file offset (through the PT_LOAD that maps it)."""
        if path not in self.bias_cache:
            loads = []
            try:
                from elftools.elf.elffile import ELFFile
                with open(path, "rb") as f:
                    for seg in ELFFile(f).iter_segments():
                        if seg["p_type"] == "PT_LOAD":
                            loads.append((seg["p_offset"], seg["p_filesz"], seg["p_vaddr"]))
            except Exception:  # noqa: BLE001 - symbolization is best effort
                pass
            self.bias_cache[path] = loads
        for offset, size, vaddr in self.bias_cache[path]:
            if offset <= file_offset < offset + max(size, 1):
                return file_offset - offset + vaddr
        return file_offset

    def names(self, pcs_with_return_flags, maps):
        """'function (file:line) [library]' for each (pc, is_return_address)."""
        wanted = collections.defaultdict(list)
        labels = {}
        for pc, is_return in pcs_with_return_flags:
            entry = maps.find(pc) if maps else None
            if entry is None:
                labels[(pc, is_return)] = "?"
                continue
            start, _, offset, path = entry
            real = self._file(path)
            if real is None:
                labels[(pc, is_return)] = f"[{os.path.basename(path) or 'anon'}]"
                continue
            vaddr = self._vaddr(real, pc - start + offset) - (1 if is_return else 0)
            wanted[real].append(((pc, is_return), vaddr))
        for real, items in wanted.items():
            missing = [(k, v) for k, v in items if (real, v) not in self.cache]
            if missing and shutil.which(self.addr2line):
                # -a starts each address's group; -i adds the functions it is inlined into.
                out = subprocess.run([self.addr2line, "-a", "-f", "-i", "-C", "-e", real,
                                      *(hex(v) for _, v in missing)],
                                     capture_output=True, text=True).stdout.splitlines()
                groups = []
                for line in out:
                    if line.startswith("0x"):
                        groups.append([])
                    elif groups:
                        groups[-1].append(line)
                for (_, v), group in zip(missing, groups):
                    functions = group[0::2] or ["??"]
                    where = group[1] if len(group) > 1 else "??:0"
                    where = os.path.basename(where.split(" (discriminator")[0])
                    label = f"{functions[0]} ({where})" if functions[0] != "??" else f"?? +{v:#x}"
                    if len(functions) > 1:
                        label += f" in {functions[-1]}"
                    self.cache[(real, v)] = label
            for key, v in items:
                labels[key] = f"{self.cache.get((real, v), '??')} [{os.path.basename(real)}]"
        return [labels[k] for k in pcs_with_return_flags]


# Comparing ----------------------------------------------------------------------------------

def classify(ref, ours, error):
    if error:
        return f"daemon error {error} ({UNWIND_ERRORS.get(error, '?')})"
    common = 0
    while common < min(len(ref), len(ours)) and ref[common] == ours[common]:
        common += 1
    if common == len(ours):
        return "daemon stack is a prefix (stopped early)"
    if common == len(ref):
        return "daemon stack is longer"
    return "frames differ"


def format_example(ref, ours, error, maps, symbolizer, dropped):
    """Both stacks frame by frame from a little before the first difference."""
    common = 0
    while common < min(len(ref), len(ours)) and ref[common] == ours[common]:
        common += 1
    first = max(0, common - 2)
    last = max(len(ref), len(ours))
    shown = list(range(first, min(last, common + 6)))
    flags = [(pc, dropped + i > 0) for pcs in (ref, ours) for i, pc in enumerate(pcs)
             if i in shown]
    names = dict(zip(flags, symbolizer.names(flags, maps)))
    lines = [f"      frames 0..{common - 1} equal" if common else "      first frame differs"]
    for i in shown:
        r = ref[i] if i < len(ref) else None
        o = ours[i] if i < len(ours) else None
        mark = "  " if r == o else "≠ "
        r_text = f"{r:#x} {names[(r, dropped + i > 0)]}" if r is not None else "-"
        o_text = f"{o:#x} {names[(o, dropped + i > 0)]}" if o is not None else "-"
        lines.append(f"    {mark}#{i:<3} ref    {r_text}")
        if r != o and (o is not None or i == len(ours)):
            lines.append(f"          daemon {o_text if o is not None else '(no more frames)'}")
    if shown and last > shown[-1] + 1:
        lines.append(f"      ... reference {len(ref)} frames, daemon {len(ours)}"
                     + (f" then error {error}" if error else ""))
    elif error:
        lines.append(f"      daemon ended with error {error} ({UNWIND_ERRORS.get(error, '?')})")
    return "\n".join(lines)


def compare(run_dir, abi, examples):
    reference = read_stacks(run_dir / "reference.txt")
    booked = read_stacks(run_dir / "daemon.txt")
    maps = {}
    for path in run_dir.glob("reference.txt.maps.*"):
        maps[int(path.name.rsplit(".", 1)[1])] = Maps(path.read_text(errors="replace"))
    symbolizer = Symbolizer(abi)
    compared = equal = 0
    kinds = collections.Counter()
    shown = []
    for key in sorted(reference):
        if key not in booked:
            continue
        compared += 1
        ref_full = reference[key][0]
        process_maps = maps.get(key[0])
        ref = drop_profiler_frames(ref_full, process_maps)
        ours, error = booked[key]
        if ref == ours and error == 0:
            equal += 1
            continue
        kind = classify(ref, ours, error)
        kinds[kind] += 1
        if len(shown) < examples and sum(1 for k, _ in shown if k == kind) < 2:
            shown.append((kind, f"    pid {key[0]} seq {key[1]}: {kind}\n" + format_example(
                ref, ours, error, process_maps, symbolizer,
                len(ref_full) - len(ref))))
    return {
        "compared": compared, "equal": equal, "kinds": kinds, "examples": [s for _, s in shown],
        "reference_only": len(set(reference) - set(booked)),
        "daemon_only": len(set(booked) - set(reference)),
        "mean_frames": (sum(len(p) for p, _ in booked.values()) / len(booked)) if booked else 0,
    }


# Running ------------------------------------------------------------------------------------

def droidheap_command():
    script = pathlib.Path(sys.executable).parent / "droidheap"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from droidheap.cli import main; main()"]


def profile(abi, bin_dir, program, args, interval, run_dir, timeout):
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    env = dict(os.environ)
    env.update({
        "DROIDHEAP_BIN_DIR": str(bin_dir),
        "DROIDHEAP_DEVICE_ROOT": str(run_dir / "device"),
        "DROIDHEAP_REFERENCE_STACKS": str(run_dir / "reference.txt"),
        "DROIDHEAP_STACK_LOG": str(run_dir / "daemon.txt"),
    })
    command = [*droidheap_command(), "--local", "--abi", abi, "-o", str(run_dir / "out"),
               "-i", str(interval), "--", str(program), *args]
    started = time.monotonic()
    with open(run_dir / "droidheap.log", "w") as out:
        try:
            code = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout, cwd=run_dir).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    if code != 0:
        log(f"  {program.name} ({abi}): droidheap exited with {code}; see {run_dir}/droidheap.log")
    return time.monotonic() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--abi", choices=[*ABIS, "all"], default="all")
    parser.add_argument("-i", "--interval", type=int, default=1,
                        help="sampling interval in bytes (1: every allocation)")
    parser.add_argument("--program", action="append", default=[],
                        help="only this program of bench/programs (repeatable)")
    parser.add_argument("--args", default="", help="arguments for every program (e.g. rounds)")
    parser.add_argument("--no-build", action="store_true", help="reuse the last builds")
    parser.add_argument("--examples", type=int, default=4, help="mismatches shown per program")
    parser.add_argument("--threshold", type=float, default=99.0)
    parser.add_argument("--timeout", type=float, default=900)
    options = parser.parse_args()

    abis = ABIS if options.abi == "all" else (options.abi,)
    jobs = os.cpu_count() or 2
    failed = False
    print(f"unwinding agreement with libgcc's in-process unwinder (interval {options.interval}):")
    for abi in abis:
        if abi == "arm64-v8a" and shutil.which("qemu-aarch64") is None:
            raise SystemExit("qemu-aarch64 is not installed (Debian: apt-get install qemu-user)")
        bin_dir = BUILD_ROOT / abi / "install" / "droidheap" / "bin"
        programs_dir = BUILD_ROOT / abi / "programs"
        if options.no_build and (bin_dir / abi).is_dir() and programs_dir.is_dir():
            programs = {p.name: p for p in sorted(programs_dir.iterdir())
                        if not options.program or p.name in options.program}
        else:
            log(f"building the reference client and the programs for {abi}...")
            bin_dir = build_reference(abi, jobs)
            programs = build_programs(abi, set(options.program))
        totals = [0, 0]
        for name, binary in programs.items():
            run_dir = BUILD_ROOT / abi / "runs" / name
            seconds = profile(abi, bin_dir, binary, options.args.split(), options.interval,
                              run_dir, options.timeout)
            result = compare(run_dir, abi, options.examples)
            compared, equal = result["compared"], result["equal"]
            totals[0] += compared
            totals[1] += equal
            pct = 100.0 * equal / compared if compared else 0.0
            below = compared == 0 or pct < options.threshold
            failed |= below
            print(f"  {abi:<9} {name:<12} {compared:6d} stacks compared  {equal:6d} equal  "
                  f"{pct:6.2f}%  ({result['mean_frames']:.1f} frames/stack, {seconds:.0f} s)"
                  + ("  BELOW THRESHOLD" if below else ""))
            unmatched = []
            if result["reference_only"]:
                unmatched.append(f"{result['reference_only']} only in the reference")
            if result["daemon_only"]:
                unmatched.append(f"{result['daemon_only']} only in the daemon's log")
            if unmatched:
                print(f"      unmatched lines: {', '.join(unmatched)}")
            if compared == 0:
                print(f"      nothing to compare: see {run_dir}")
            for kind, count in result["kinds"].most_common():
                print(f"      {count:6d} × {kind}")
            for example in result["examples"]:
                print(example)
        if totals[0]:
            print(f"  {abi:<9} {'all':<12} {totals[0]:6d} stacks compared  {totals[1]:6d} equal  "
                  f"{100.0 * totals[1] / totals[0]:6.2f}%")
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
