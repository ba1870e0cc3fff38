"""Symbolizing this machine's own libraries and programs, as a profile of any program meets them:
the build id read as binutils reads it (only the note owned by "GNU": SystemTap's SDT notes share
its type number), and function names out of an address inside an exported function. Then where
unstripped files are looked for."""
import pathlib
import re
import shutil
import subprocess
import sysconfig

import pytest
from elftools.elf.elffile import ELFFile

from droidheap.elf.elf_file import demangle
from droidheap.symbol_dirs import search_dirs
from droidheap.symbolizer import Symbolizer

LIB_DIR = pathlib.Path("/usr/lib") / (sysconfig.get_config_var("MULTIARCH") or "")


def _system_files():
    files = [LIB_DIR / name for name in ("libc.so.6", "libstdc++.so.6", "libm.so.6")]
    files += [pathlib.Path("/usr/bin/python3"), pathlib.Path("/usr/bin/perl")]  # Debian's own
    return [pytest.param(path.resolve(), id=path.name) for path in files]


def _readelf_build_id(path: pathlib.Path) -> str:
    assert shutil.which("readelf"), "binutils' readelf is missing (scripts/install_test_tools installs it)"
    out = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True).stdout
    found = re.search(r"Build ID: ([0-9a-f]+)", out)
    assert found, f"readelf finds no build id in {path}"
    return found.group(1)


def _exported_functions(path: pathlib.Path):
    """{start: raw names} of the functions .dynsym defines with a size."""
    by_start = {}
    with open(path, "rb") as f:
        table = ELFFile(f).get_section_by_name(".dynsym")
        for sym in table.iter_symbols():
            if (sym["st_info"]["type"] == "STT_FUNC" and sym["st_size"] > 8
                    and sym["st_shndx"] != "SHN_UNDEF"):
                by_start.setdefault(sym["st_value"], (sym["st_size"], set()))[1].add(sym.name)
    return by_start


@pytest.mark.parametrize("path", _system_files())
def test_a_system_file_gives_its_build_id_and_function_names(path):
    build_id = _readelf_build_id(path)
    functions = _exported_functions(path)
    assert functions, path
    # A few functions spread over the file; each looked up at a return address in its middle.
    starts = sorted(functions)[::max(1, len(functions) // 5)]
    pcs = {start + functions[start][0] // 2: start for start in starts}
    symbolizer = Symbolizer(host_paths=True)
    module = symbolizer.symbolize(str(path), build_id, pcs)
    assert module.elf == path and symbolizer.warnings == [], symbolizer.warnings
    for pc, start in pcs.items():
        line = module.lines[pc][-1]  # the outermost: the function the symbol table names
        assert line.function in demangle(sorted(functions[start][1])), (hex(pc), line)


def test_search_dirs_come_from_the_flags_then_perfetto_binary_path_then_the_product_out(
        tmp_path):
    product = tmp_path / "out" / "target" / "product" / "x"
    (product / "symbols").mkdir(parents=True)
    environ = {"PERFETTO_BINARY_PATH": "/a::/b", "ANDROID_PRODUCT_OUT": str(product)}
    found = search_dirs([tmp_path / "flag"], environ)
    assert found.searched == (tmp_path / "flag", pathlib.Path("/a"), pathlib.Path("/b"),
                              product / "symbols")
    assert found.walked == (tmp_path / "flag",)  # the environment's are searched, never walked
    assert search_dirs([], {"ANDROID_PRODUCT_OUT": str(tmp_path / "none")}).searched == ()
