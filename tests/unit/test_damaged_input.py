"""Damaged traces and pprof files on the host, mutated at random from real ones (a fixed seed per
run, DROIDHEAP_MUTATIONS of each kind; the closing notes of issue 11 give longer runs): reading
them (report, diff) and converting them (symbolize) ends in results or in one DroidheapError,
never another exception; a trace cut short keeps every dump before the cut and says what it
dropped; a directory with one damaged pprof file keeps the others and names it. Interned data
named again and again (a stack's frames, the samples of one stack, an address's inlined lines, a
pprof location's) costs memory linear in the input's size, never their product (issue 41).
A library whose DWARF is damaged keeps its symbols, and the symbolizer says what it could not
read."""
import gzip
import os
import pathlib
import random
import shutil
import subprocess
import tracemalloc

import pytest
from elftools.elf.elffile import ELFFile

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from droidheap.convert import convert_trace
from droidheap.elf.elf_file import ElfFile
from droidheap.elf.headers import read_headers
from droidheap.errors import DroidheapError
from droidheap.pprof import Profile
from droidheap.results.load import load_results
from droidheap.results.report import build_report
from droidheap.symbolizer import Symbolizer
from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import iter_fields, parse_trace
from fixtures_trace import two_process_trace
from test_cli_errors import assert_one_line_error, run_cli

MUTATIONS = int(os.environ.get("DROIDHEAP_MUTATIONS", "150"))
# Reading an input may cost this much memory a byte of it, past a fixed allowance: enough for
# what the readers keep per frame and per sample, far below what one input's stacks expanded per
# sample, or per inlined line per frame of every stack, would cost.
BYTES_PER_INPUT_BYTE = 2000
ALLOWANCE = 64 << 20


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random kind of damage: a cut, flipped bits, a span overwritten, removed or repeated,
    bytes set to the values that make varints and lengths lie."""
    b = bytearray(data)
    at = rng.randrange(len(b))
    span = rng.randrange(1, 64)
    kind = rng.randrange(6)
    if kind == 0:
        del b[at:]
    elif kind == 1:
        for _ in range(rng.randrange(1, 9)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == 2:
        b[at:at + span] = bytes(rng.randrange(256) for _ in range(len(b[at:at + span])))
    elif kind == 3:
        del b[at:at + span]
    elif kind == 4:
        b[at:at] = b[at:at + span]
    else:
        for _ in range(rng.randrange(1, 5)):
            b[rng.randrange(len(b))] = rng.choice((0x00, 0x7f, 0x80, 0xff))
    return bytes(b)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A trace of two processes and what converting it writes: its symbolized trace and pprofs."""
    out = tmp_path_factory.mktemp("converted")
    raw = out / "raw-trace"
    raw.write_bytes(two_process_trace(fragments=2).to_bytes())
    convert_trace(raw, out)
    return out


def survives(read, path) -> bool:
    """Whether `read(path)` gave results; a DroidheapError is the other allowed outcome."""
    try:
        read(path)
        return True
    except DroidheapError as e:
        assert "\n" not in str(e).strip(), e  # one line
        return False


@pytest.mark.parametrize("name", ["raw-trace", "symbolized-trace"])
def test_a_damaged_trace_is_read_or_refused_in_one_line(converted, name, tmp_path):
    data = (converted / name).read_bytes()
    rng = random.Random(f"trace-{name}")
    damaged = tmp_path / "trace"
    read = 0
    for i in range(MUTATIONS):
        damaged.write_bytes(mutate(data, rng))
        read += survives(load_results, damaged)
        out = tmp_path / f"out{i}"
        survives(lambda path: convert_trace(path, out), damaged)
    assert read > MUTATIONS // 4  # most damage leaves something to read


def test_a_damaged_pprof_is_read_or_refused_in_one_line(converted, tmp_path):
    pprofs = sorted(converted.glob("heap_dump.*.pb.gz"))
    rng = random.Random("pprof")
    damaged = tmp_path / "heap_dump.0.1.libc.malloc.pb.gz"
    for _ in range(MUTATIONS):
        raw = gzip.decompress(rng.choice(pprofs).read_bytes())
        # Compressed again, most damage gets past gzip's checksum to the protobuf inside.
        damaged.write_bytes(gzip.compress(mutate(raw, rng)) if rng.random() < 0.8
                            else mutate(gzip.compress(raw), rng))
        survives(load_results, damaged)


def _repeated(field, times: int) -> None:
    """A repeated field's entries `times` times over, in order."""
    entries = list(field)
    del field[:]
    for _ in range(times):
        field.extend(entries)


def amplify_trace(data: bytes, rng: random.Random) -> bytes:
    """One to three of: a call stack's frames named again and again, a sample of that stack
    repeated, a symbolized address's lines repeated."""
    trace = pb.Trace.FromString(data)
    stacks = [c for p in trace.packet for c in p.interned_data.callstacks]
    stack = rng.choice(stacks)
    samples = [(d.samples, s) for p in trace.packet for d in p.profile_packet.process_dumps
               for s in d.samples if s.callstack_id == stack.iid]
    addresses = [a for p in trace.packet for a in p.module_symbols.address_symbols if a.lines]
    for kind in rng.sample(range(3), rng.randrange(1, 4)):
        times = rng.choice((100, 1000, 3000))
        if kind == 0:
            _repeated(stack.frame_ids, times)
        elif kind == 1 and samples:
            heap, one = rng.choice(samples)
            for i in range(times):
                heap.add().CopyFrom(one)
                heap[-1].self_allocated += i  # each its own sample
        elif kind == 2 and addresses:
            _repeated(rng.choice(addresses).lines, times)
    return trace.SerializeToString()


def amplify_pprof(data: bytes, rng: random.Random) -> bytes:
    """One to three of: a location's lines repeated, a sample's locations named again and again,
    one sample repeated."""
    profile = Profile.FromString(data)
    for kind in rng.sample(range(3), rng.randrange(1, 4)):
        times = rng.choice((100, 1000, 3000))
        if kind == 0 and profile.location:
            _repeated(rng.choice(profile.location).line, times)
        elif kind == 1 and profile.sample:
            _repeated(rng.choice(profile.sample).location_id, times)
        elif kind == 2 and profile.sample:
            one = rng.choice(profile.sample)
            for _ in range(times):
                profile.sample.add().CopyFrom(one)
    return profile.SerializeToString()


def costs_linear_memory(work, size: int) -> None:
    """Runs `work` (results or one DroidheapError) under tracemalloc: its peak of Python memory
    stays within BYTES_PER_INPUT_BYTE a byte of an input of `size` bytes, past ALLOWANCE."""
    tracemalloc.start()
    try:
        try:
            work()
        except DroidheapError as e:
            assert "\n" not in str(e).strip(), e
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < ALLOWANCE + BYTES_PER_INPUT_BYTE * size, (peak, size)


AMPLIFIED = max(1, MUTATIONS // 15)


@pytest.mark.parametrize("name", ["raw-trace", "symbolized-trace"])
def test_interned_data_named_many_times_costs_memory_linear_in_the_trace(converted, name,
                                                                         tmp_path):
    data = (converted / name).read_bytes()
    rng = random.Random(f"amplified-{name}")
    amplified = tmp_path / "trace"
    for i in range(AMPLIFIED):
        amplified.write_bytes(amplify_trace(data, rng))
        size = amplified.stat().st_size

        def read():
            results = load_results(amplified)
            build_report(results.profiles, results.warnings)
        costs_linear_memory(read, size)
        costs_linear_memory(lambda: convert_trace(amplified, tmp_path / f"out{i}"), size)


def test_interned_data_named_many_times_costs_memory_linear_in_the_pprof(converted, tmp_path):
    pprofs = sorted(converted.glob("heap_dump.*.pb.gz"))
    rng = random.Random("amplified-pprof")
    amplified = tmp_path / "heap_dump.0.1.libc.malloc.pb.gz"
    for _ in range(AMPLIFIED):
        raw = amplify_pprof(gzip.decompress(rng.choice(pprofs).read_bytes()), rng)
        amplified.write_bytes(gzip.compress(raw))

        def read():
            results = load_results(amplified)
            build_report(results.profiles, results.warnings)
        costs_linear_memory(read, len(raw))


def test_a_trace_cut_anywhere_keeps_every_dump_before_the_cut(converted):
    data = (converted / "raw-trace").read_bytes()
    whole = rebuild_dumps(parse_trace(data).packets).dumps
    for cut in range(1, len(data), max(1, len(data) // MUTATIONS)):
        contents = parse_trace(data[:cut])
        dumps = rebuild_dumps(contents.packets)
        lost = sum(len(d) for d in whole.values()) - sum(len(d) for d in dumps.dumps.values())
        for pid, kept in dumps.dumps.items():
            assert [d.samples for d in kept[:-1]] == [d.samples for d in whole[pid][:len(kept) - 1]]
            # The last may have lost its final fragments: what arrived is kept, and said so.
            last, same = kept[-1].samples, whole[pid][len(kept) - 1].samples
            assert last == same[:len(last)], cut
            if last != same:
                assert any("cut short" in w for w in dumps.warnings), (cut, dumps.warnings)
        if lost and contents.intact_length != cut:  # a cut between packets leaves a valid trace
            assert contents.warnings or dumps.warnings, cut


def test_a_directory_with_one_damaged_pprof_keeps_the_others(converted, tmp_path):
    pprofs = sorted(converted.glob("heap_dump.*.pb.gz"))
    for pprof in pprofs:
        (tmp_path / pprof.name).write_bytes(pprof.read_bytes())
    damaged = tmp_path / pprofs[0].name
    damaged.write_bytes(damaged.read_bytes()[:20])
    results = load_results(tmp_path)
    assert len(results.profiles) == len(pprofs) - 1
    assert len(results.warnings) == 1 and str(damaged) in results.warnings[0], results.warnings
    for pprof in pprofs[1:]:
        (tmp_path / pprof.name).write_bytes(b"not a pprof")
    with pytest.raises(DroidheapError):
        load_results(tmp_path)


@pytest.mark.parametrize("name", ["raw-trace", "symbolized-trace"])
def test_report_diff_and_check_of_a_trace_cut_short_warn_naming_it(converted, name, tmp_path):
    cut = tmp_path / name
    cut.write_bytes((converted / name).read_bytes()[:-10])  # into the second dump's packet
    for args in (["report", str(cut)], ["report", str(cut), "--html", str(tmp_path / "r.html")],
                 ["diff", str(cut)], ["check", str(cut), "--max-growth", "1M"]):
        result = run_cli(args, tmp_path)
        assert result.returncode == 0, result.stderr
        warnings = [line for line in (result.stdout + result.stderr).splitlines()
                    if line.startswith("warning: ")]
        assert len(warnings) == 1, (args, result.stdout, result.stderr)
        assert str(cut) in warnings[0] and "cut short or damaged" in warnings[0], warnings
        assert "before it are read" in warnings[0], warnings


def test_a_trace_cut_short_before_its_first_dump_is_an_error(converted, tmp_path):
    data = (converted / "raw-trace").read_bytes()
    first_dump = next(i for i, p in enumerate(parse_trace(data).packets)
                      if p.HasField("profile_packet"))
    before = [end for *_, end in iter_fields(data)][first_dump - 1]  # where that packet starts
    for cut, expected in ((before + 5, "with no whole heap dump before"),
                          (5, "before its first packet ended")):
        damaged = tmp_path / f"cut{cut}"
        damaged.write_bytes(data[:cut])
        for args in (["report", str(damaged)], ["diff", str(damaged)],
                     ["check", str(damaged), "--max-growth", "1M"]):
            result = run_cli(args, tmp_path)
            assert_one_line_error(result, expected)
            assert str(damaged) in result.stderr



INLINE_SITES = pathlib.Path(__file__).parents[1] / "programs" / "inline_sites.cc"
# The sections droidheap's own DIE walk reads (die_scan.py, dwarf_unit.py, range_lists.py).
DIE_SECTIONS = (".debug_info", ".debug_abbrev", ".debug_ranges", ".debug_rnglists",
                ".debug_addr", ".debug_str_offsets")


@pytest.mark.parametrize("build", [["g++", "-gdwarf-4"], ["clang++", "-gdwarf-5"]],
                         ids=["gcc-dwarf4", "clang-dwarf5"])
def test_a_library_with_damaged_dwarf_keeps_its_symbols(build, tmp_path):
    if shutil.which(build[0]) is None:
        pytest.fail(f"scripts/install_test_tools installs {build[0]}")
    program = tmp_path / "inline_sites"
    subprocess.run([*build, "-O2", str(INLINE_SITES), "-o", str(program)], check=True)
    original = program.read_bytes()
    sections = [s for name, s in read_headers(original).sections.items() if name in DIE_SECTIONS]
    with open(program, "rb") as f:
        pcs = [symbol["st_value"] + 4 for symbol in ELFFile(f).get_section_by_name(".symtab")
               .iter_symbols() if symbol["st_info"]["type"] == "STT_FUNC" and symbol["st_value"]]
    elf = ElfFile(program)
    named = {pc for pc in pcs if elf.symbol_at(pc - elf.return_adjust)}  # by the symbol table
    rng = random.Random(f"dwarf-{build[0]}")
    damaged = tmp_path / "damaged"
    for _ in range(max(1, MUTATIONS // 5)):
        section = rng.choice(sections)
        data = original[section.offset:section.offset + section.size]
        changed = mutate(data, rng)[:len(data)].ljust(len(data), b"\0")
        damaged.write_bytes(original[:section.offset] + changed
                            + original[section.offset + section.size:])
        symbolizer = Symbolizer(host_paths=True)
        module = symbolizer.symbolize(str(damaged), "", pcs)
        assert named <= set(module.lines), (section.name, symbolizer.warnings)
        assert all(warning.startswith(f"{damaged}: cannot read its")
                   for warning in symbolizer.warnings), symbolizer.warnings
