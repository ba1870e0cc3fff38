"""Symbolizing real return addresses of a small program compiled here with debug info."""
import pathlib
import shutil
import subprocess

import pytest
from elftools.elf.elffile import ELFFile

from droidheap.elf.elf_file import demangle
from droidheap.symbolizer import SymbolTable, Symbolizer
from droidheap.trace.heap_dumps import Frame, Mapping
from fixtures_trace import compile_program
from tests.requirements import require


def _symbolize(program, device_path=None, search_dirs=(), build_id=None, rel_pcs=None):
    symbolizer = Symbolizer(search_dirs, host_paths=True)
    pcs = rel_pcs if rel_pcs is not None else list(program.return_addresses.values())
    module = symbolizer.symbolize(device_path or str(program.path),
                                  program.build_id if build_id is None else build_id, pcs)
    return module, symbolizer


def test_return_address_is_looked_up_in_its_call_instruction(program):
    ret = program.return_addresses["leaf_alloc"]  # in middle(), after `call leaf_alloc`
    module, _ = _symbolize(program, rel_pcs=[ret])
    (line,) = module.lines[ret]
    assert line.function == "middle"
    assert line.line == program.line_of("CALL_LEAF")
    assert line.file == str(program.source)
    # Sanity: the unadjusted address belongs to the next statement, so the test can tell.
    assert program.line_of("AFTER_CALL") != program.line_of("CALL_LEAF")


def test_results_are_keyed_by_the_original_rel_pc(program):
    pcs = [program.return_addresses["malloc"], program.return_addresses["middle"]]
    module, _ = _symbolize(program, rel_pcs=pcs)
    assert sorted(module.lines) == sorted(pcs)
    assert module.lines[pcs[0]][0].function == "leaf_alloc"
    assert module.lines[pcs[0]][0].line == program.line_of("LEAF_MALLOC")
    assert module.lines[pcs[1]][0].function == "main"
    assert module.lines[pcs[1]][0].line == program.line_of("CALL_MIDDLE")
    assert module.has_functions and module.has_filenames and module.has_line_numbers


def test_return_address_just_past_a_function_names_that_function(program):
    # A call as a function's last instruction returns to the next function's first byte.
    start_of_middle = program.functions["middle"]
    module, _ = _symbolize(program, rel_pcs=[start_of_middle])
    assert module.lines[start_of_middle][0].function == "leaf_alloc"


def test_file_found_under_search_dir_by_device_path(program, tmp_path):
    root = tmp_path / "symbols"
    (root / "system" / "bin").mkdir(parents=True)
    shutil.copy(program.path, root / "system" / "bin" / "prog")
    ret = program.return_addresses["leaf_alloc"]
    module, _ = _symbolize(program, device_path="/system/bin/prog", search_dirs=[root],
                           rel_pcs=[ret])
    assert module.elf == root / "system" / "bin" / "prog"
    assert module.lines[ret][0].function == "middle"


def test_file_with_another_build_id_is_not_used(program):
    module, symbolizer = _symbolize(program, build_id="00" * 20)
    assert module.elf is None and module.lines == {}
    assert "differs" in module.unsymbolized_reason and symbolizer.warnings == []


def test_missing_file_gives_no_symbols_and_table_falls_back_to_offset_name(program):
    module, symbolizer = _symbolize(program, device_path="/nowhere/libfoo.so", build_id="")
    assert module.lines == {} and symbolizer.warnings == []
    table = SymbolTable({("/nowhere/libfoo.so", ""): module})
    frame = Frame(Mapping("/nowhere/libfoo.so", ""), 0x1234)
    assert table.lines(frame)[0].function == "libfoo.so+0x1234"


def test_a_rel_pc_written_without_the_load_bias_of_lld_code_is_found(tmp_path):
    """Android 10's heapprofd writes lld-linked code's rel_pcs without the segment's load bias
    (and the mapping with none): given the mapping's file offset, the file's bias is added."""
    program = compile_program(tmp_path, "clang", flags=["-fuse-ld=lld"])  # scripts/install's
    with open(program.path, "rb") as f:
        (code,) = [s.header for s in ELFFile(f).iter_segments()
                   if s.header.p_type == "PT_LOAD" and s.header.p_flags & 1]
    bias = code.p_vaddr - code.p_offset
    assert bias, "lld put code at its file offset: nothing to show"
    written = program.return_addresses["leaf_alloc"] - bias
    offset = code.p_offset & ~0xFFF  # the mapping's: the page its code starts in
    module = Symbolizer(host_paths=True).symbolize(str(program.path), program.build_id, [written],
                                    {written: offset})
    assert module.lines[written][0].function == "middle"
    plain = Symbolizer(host_paths=True).symbolize(str(program.path), program.build_id, [written])
    assert written not in plain.lines or plain.lines[written][0].function != "middle"


def test_pseudo_frame_is_named_from_its_path_and_not_symbolized():
    frame = Frame(Mapping("/[droidheap: unwind error]", ""), 3)
    (line,) = SymbolTable({}).lines(frame)
    assert line.function == "[droidheap: unwind error]"


def test_heapprofds_error_frame_keeps_its_code_and_is_not_looked_for():
    """Android's heapprofd books an unwinding error as a frame named "ERROR N" (N: the unwinder's
    error code) in a mapping whose one path component is "ERROR": not a file to symbolize."""
    frame = Frame(Mapping("/ERROR", ""), 0, function_name="ERROR 1")
    assert frame.mapping.is_pseudo
    (line,) = SymbolTable({}).lines(frame)
    assert line.function == "ERROR 1"


def test_stripped_file_falls_back_to_dynamic_symbols_or_nothing(program, tmp_path):
    stripped = tmp_path / "stripped"
    subprocess.run(["strip", "-o", str(stripped), str(program.path)], check=True)
    ret = program.return_addresses["leaf_alloc"]
    module, symbolizer = _symbolize(program, device_path=str(stripped), rel_pcs=[ret])
    # middle() is not exported: an executable's .dynsym does not name it.
    assert ret not in module.lines and symbolizer.warnings == []


def test_separate_debug_file_found_by_build_id(program, tmp_path):
    debug_root = tmp_path / "debug"
    tail = pathlib.Path(".build-id", program.build_id[:2], program.build_id[2:] + ".debug")
    (debug_root / tail).parent.mkdir(parents=True)
    subprocess.run(["objcopy", "--only-keep-debug", str(program.path), str(debug_root / tail)],
                   check=True)
    stripped = tmp_path / "prog"
    subprocess.run(["strip", "-o", str(stripped), str(program.path)], check=True)
    ret = program.return_addresses["leaf_alloc"]
    module, _ = _symbolize(program, device_path=str(stripped), search_dirs=[debug_root],
                           rel_pcs=[ret])
    assert module.lines[ret][0].function == "middle"
    assert module.lines[ret][0].line == program.line_of("CALL_LEAF")


def test_corrupt_line_table_keeps_function_names_and_warns(program, tmp_path):
    broken = tmp_path / "broken"
    data = bytearray(program.path.read_bytes())
    with open(program.path, "rb") as f:
        section = ELFFile(f).get_section_by_name(".debug_line")
        offset, size = section["sh_offset"], section["sh_size"]
    data[offset:offset + size] = b"\xff" * size
    broken.write_bytes(bytes(data))
    ret = program.return_addresses["leaf_alloc"]
    module, symbolizer = _symbolize(program, device_path=str(broken), rel_pcs=[ret])
    (line,) = module.lines[ret]
    assert (line.function, line.line) == ("middle", 0)
    assert any("line table" in w for w in symbolizer.warnings)


def test_non_elf_file_is_ignored_with_a_warning(tmp_path):
    junk = tmp_path / "libjunk.so"
    junk.write_bytes(b"not an elf at all")
    symbolizer = Symbolizer(host_paths=True)
    module = symbolizer.symbolize(str(junk), "", [0x10])
    assert module.elf is None and module.lines == {}
    assert "cannot read" in symbolizer.warnings[0]


def test_the_dynamic_linkers_names_lose_its_prefix_and_are_marked_as_its_own(program, tmp_path):
    """bionic's linker is built with its symbols renamed `__dl_...` (objcopy --prefix-symbols),
    and is installed with no DWARF."""
    linker = tmp_path / "linker64"
    subprocess.run(["objcopy", "--strip-debug", "--prefix-symbols=__dl_", str(program.path),
                    str(linker)], check=True)
    ret = program.return_addresses["leaf_alloc"]
    module, _ = _symbolize(program, device_path=str(linker), rel_pcs=[ret])
    assert module.lines[ret][0].function == "[linker]middle"


def test_the_dynamic_linkers_cxx_names_are_demangled():
    # binutils' c++filt (scripts/install_test_tools); skipped without it, failed in CI.
    require(None if shutil.which("c++filt") else "c++filt is not installed (binutils)")
    assert demangle(["__dl__ZN6soinfo17call_constructorsEv", "_ZN6soinfo17call_constructorsEv",
                     "__dl_strlen", "main", "[linker]strlen"]) == [
        "[linker]soinfo::call_constructors()", "soinfo::call_constructors()", "[linker]strlen",
        "main", "[linker]strlen"]


def test_aarch64_return_address_is_moved_back_four_bytes(tmp_path):
    program = compile_program(tmp_path, "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-objdump")
    if program is None:
        pytest.skip("the aarch64 cross toolchain is not installed")
    ret = program.return_addresses["leaf_alloc"]
    module, _ = _symbolize(program, rel_pcs=[ret])
    assert module.lines[ret][0].function == "middle"
    assert module.lines[ret][0].line == program.line_of("CALL_LEAF")
