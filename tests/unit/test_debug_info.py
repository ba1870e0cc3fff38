"""Inline frames, separate debug files and MiniDebugInfo, on tests/programs/inline_sites.cc built
here with -O2 -g: every frame is compared with llvm-symbolizer's, then the same frames must come
back from a stripped copy through its .gnu_debuglink, and static function names through
MiniDebugInfo."""
import lzma
import pathlib
import re
import shutil
import subprocess

import pytest

from droidheap.elf.elf_file import demangle
from droidheap.symbolizer import Symbolizer

SOURCE = pathlib.Path(__file__).parents[1] / "programs" / "inline_sites.cc"
TOOLS = ("g++", "objdump", "objcopy", "strip", "llvm-symbolizer", "readelf")


def _tool_check():
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.fail(f"scripts/install_test_tools installs {', '.join(missing)}")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    _tool_check()
    out = tmp_path_factory.mktemp("inline")
    binary = out / "inline_sites"
    subprocess.run(["g++", "-O2", "-g", "-Wl,--build-id", str(SOURCE), "-o", str(binary)],
                   check=True)
    return binary


def _return_addresses(binary):
    """The address after every call instruction: where a stack's frames point."""
    lines = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(binary)], check=True,
                           capture_output=True, text=True).stdout.splitlines()
    found = []
    for line, following in zip(lines, lines[1:]):
        after = re.match(r"\s*([0-9a-f]+):", following)
        if re.search(r"\tcall", line) and after:
            found.append(int(after[1], 16))
    return sorted(set(found))


def _frames(module, rel_pc):
    return [(line.function, pathlib.PurePosixPath(line.file).name, line.line)
            for line in module.lines.get(rel_pc, ())]


def _llvm_frames(binary, rel_pcs):
    out = subprocess.run(["llvm-symbolizer", f"--obj={binary}", "--demangle"]
                         + [hex(pc - 1) for pc in rel_pcs],
                         check=True, capture_output=True, text=True).stdout
    result = {}
    for pc, block in zip(rel_pcs, out.strip("\n").split("\n\n")):
        lines = block.splitlines()
        frames = []
        for function, where in zip(lines[::2], lines[1::2]):
            file, line = where.rsplit(":", 2)[:2]
            # llvm-symbolizer 14 leaves some template names mangled; c++filt reads them.
            frames.append((demangle([function])[0], pathlib.PurePosixPath(file).name, int(line)))
        result[pc] = [] if frames == [("??", "??", 0)] else frames
    return result


def _marker_line(marker):
    for number, text in enumerate(SOURCE.read_text().splitlines(), start=1):
        if marker in text:
            return number
    raise AssertionError(marker)


def test_every_frame_matches_llvm_symbolizer_inline_frames_included(built):
    pcs = _return_addresses(built)
    module = Symbolizer(host_paths=True).symbolize(str(built), "", pcs)
    expected = _llvm_frames(built, pcs)
    for pc in pcs:
        got = [(f, file, line) if line else (f, "?", 0) for f, file, line in _frames(module, pc)]
        want = [(f, file, line) if line else (f, "?", 0) for f, file, line in expected[pc]]
        assert got == want, hex(pc)
    assert module.has_inline_frames


def test_the_always_inline_chain_reads_innermost_first(built):
    pcs = _return_addresses(built)
    module = Symbolizer(host_paths=True).symbolize(str(built), "", pcs)
    chains = [_frames(module, pc) for pc in pcs]
    assert [("inner_alloc", "inline_sites.cc", _marker_line("INNER_MALLOC")),
            ("middle_alloc", "inline_sites.cc", _marker_line("MIDDLE_CALL")),
            ("outer_alloc(int)", "inline_sites.cc", _marker_line("OUTER_CALL"))] in chains
    # std::vector's growth, inlined into grow_vector: push_back is a frame of its own.
    growth = [c for c in chains if c and c[-1][0] == "grow_vector(int)" and len(c) > 1]
    assert any(f[0].startswith("std::vector<long, std::allocator<long> >::push_back")
               and f[1] == "stl_vector.h" for c in growth for f in c), growth


def _split_debug(binary, out_dir, debug_name="inline_sites.debug"):
    """A stripped copy of `binary` whose .gnu_debuglink names a debug file beside it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    debug = out_dir / debug_name
    stripped = out_dir / binary.name
    subprocess.run(["objcopy", "--only-keep-debug", str(binary), str(debug)], check=True)
    subprocess.run(["strip", "--strip-all", str(binary), "-o", str(stripped)], check=True)
    subprocess.run(["objcopy", f"--add-gnu-debuglink={debug}", str(stripped)], check=True,
                   cwd=out_dir)
    return stripped, debug


@pytest.mark.parametrize("place", ["beside", ".debug", "system"])
def test_debuglink_brings_back_names_lines_and_inline_frames(built, tmp_path, place):
    pcs = _return_addresses(built)
    reference = Symbolizer(host_paths=True).symbolize(str(built), "", pcs)
    stripped, debug = _split_debug(built, tmp_path / "bin")
    system_debug = tmp_path / "usr-lib-debug"
    if place == ".debug":
        (debug.parent / ".debug").mkdir()
        debug.rename(debug.parent / ".debug" / debug.name)
    elif place == "system":
        target = system_debug / stripped.parent.relative_to("/")
        target.mkdir(parents=True)
        debug.rename(target / debug.name)
    assert Symbolizer(system_debug_dir=system_debug, host_paths=True).symbolize(str(stripped), "", pcs).lines \
        == reference.lines


def test_a_debug_file_with_another_build_id_is_not_used(built, tmp_path):
    pcs = _return_addresses(built)
    other = tmp_path / "other" / "inline_sites"
    other.parent.mkdir()
    # The same source with one more function: another build id, other addresses.
    source = tmp_path / "other.cc"
    source.write_text(SOURCE.read_text() + "\nint unused_extra(int x) { return x * 3; }\n")
    subprocess.run(["g++", "-O2", "-g", "-Wl,--build-id", str(source), "-o", str(other)],
                   check=True)
    stripped, debug = _split_debug(built, tmp_path / "bin")
    subprocess.run(["objcopy", "--only-keep-debug", str(other), str(debug)], check=True)
    module = Symbolizer(system_debug_dir=tmp_path, host_paths=True).symbolize(str(stripped), "", pcs)
    assert not module.has_filenames and not module.has_inline_frames


def test_minidebuginfo_names_static_functions_of_a_stripped_file(built, tmp_path):
    pcs = _return_addresses(built)
    stripped = tmp_path / "inline_sites"
    mini = tmp_path / "mini"
    subprocess.run(["strip", "--strip-all", str(built), "-o", str(stripped)], check=True)
    subprocess.run(["strip", "--strip-debug", str(built), "-o", str(mini)], check=True)
    (tmp_path / "mini.xz").write_bytes(lzma.compress(mini.read_bytes(), format=lzma.FORMAT_XZ))
    without = Symbolizer(system_debug_dir=tmp_path, host_paths=True).symbolize(str(stripped), "", pcs)
    assert "outer_alloc(int)" not in {f for pc in pcs for f, _, _ in _frames(without, pc)}
    subprocess.run(["objcopy", f"--add-section=.gnu_debugdata={tmp_path / 'mini.xz'}",
                    str(stripped)], check=True)
    module = Symbolizer(system_debug_dir=tmp_path, host_paths=True).symbolize(str(stripped), "", pcs)
    assert "outer_alloc(int)" in {f for pc in pcs for f, _, _ in _frames(module, pc)}
