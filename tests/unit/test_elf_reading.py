"""What droidheap reads of ELF and DWARF by itself, for speed (headers.py, the aranges and the
abbreviation tables, the units and the function and inlined-call DIEs with their ranges and
names), agrees with pyelftools on this machine's files of every ABI it has: 64- and 32-bit x86,
arm64; and on programs built here by GCC and clang, DWARF 4 and 5, 32- and 64-bit."""
import fnmatch
import glob
import mmap
import os
import pathlib
import shutil
import subprocess

import pytest
from elftools.dwarf.ranges import BaseAddressEntry
from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_E_MACHINE

from droidheap.elf.abbrev_table import AbbreviationCache
from droidheap.elf.die_scan import find_dies
from droidheap.elf.dwarf_index import die_name, read_aranges
from droidheap.elf.dwarf_unit import DebugInfo
from droidheap.elf.elf_file import ElfFile
from droidheap.elf.headers import NotElf, read_headers
from droidheap.elf.line_table import file_names, line_rows
from droidheap.elf.range_lists import die_ranges


def _files(packages, pattern: str, count: int):
    """The first `count` ELF files of `packages` (installed by scripts/install or
    scripts/install_test_tools, which a fresh machine has too, not whatever else this one has)
    whose real paths match `pattern`."""
    paths = set()
    for package in packages:
        for listing in glob.glob(f"/var/lib/dpkg/info/{package}.list") + \
                glob.glob(f"/var/lib/dpkg/info/{package}:*.list"):
            paths.update(os.path.realpath(line) for line in pathlib.Path(listing).read_text()
                         .splitlines() if os.path.isfile(line))
    found = []
    for path in sorted(p for p in paths if fnmatch.fnmatch(p, pattern)):
        with open(path, "rb") as f:
            if f.read(4) == b"\x7fELF":
                found.append(path)
                if len(found) == count:
                    break
    return found


ELF_FILES = (_files(["libc6", "libstdc++6", "libelf1", "libdw1", "libllvm14"],
                    "/usr/lib/x86_64-linux-gnu/lib*.so*", 40)
             + _files(["coreutils"], "/usr/bin/*", 20)
             + _files(["libc6-i386", "lib32stdc++6", "lib32gcc-s1"], "/usr/lib32/lib*.so*", 10)
             + _files(["libc6-arm64-cross", "libstdc++6-arm64-cross"],
                      "/usr/aarch64-linux-gnu/lib/lib*.so*", 10))
DEBUG_FILES = _files(["libc6-dbg"], "/usr/lib/debug/.build-id/*/*.debug", 12)


def test_the_files_cover_every_class_and_machine():
    machines = set()
    for path in ELF_FILES:
        with open(path, "rb") as f:
            machines.add(ELFFile(f)["e_machine"])
    assert {"EM_X86_64", "EM_386", "EM_AARCH64"} <= machines, machines
    assert DEBUG_FILES, "no debug files (scripts/install_test_tools installs libc6-dbg)"
    assert len(ELF_FILES) >= 50, ELF_FILES


@pytest.mark.parametrize("path", ELF_FILES)
def test_headers_agree_with_pyelftools(path):
    with open(path, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        theirs = ELFFile(f)
        ours = read_headers(data)
        assert ours.machine == ENUM_E_MACHINE[theirs["e_machine"]]
        assert set(ours.sections) == {s.name for s in theirs.iter_sections()}
        for section in theirs.iter_sections():
            plain = section["sh_type"] != "SHT_NOBITS" and not section["sh_flags"] & 0x800
            if plain and ours.sections[section.name].offset == section["sh_offset"]:
                assert ours.data(data, section.name) == section.data(), section.name
        notes = [n for s in theirs.iter_sections("SHT_NOTE") for n in s.iter_notes()
                 if n["n_name"] == "GNU" and n["n_type"] == "NT_GNU_BUILD_ID"]
        assert ElfFile(pathlib.Path(path)).build_id == (notes[0]["n_desc"] if notes else "")


@pytest.mark.parametrize("damage", [b"", b"\x7fELF", b"\x7fELF\x02\x01" + b"\0" * 58,
                                    b"MZ" + b"\0" * 100])
def test_damaged_headers_are_not_elf(damage):
    data = damage
    if len(damage) == 64:  # a 64-bit header whose section table lies past the end
        data = damage[:0x28] + (10**6).to_bytes(8, "little") + damage[0x30:0x3C] + b"\x40\0\x05\0"
    with pytest.raises(NotElf):
        read_headers(data)


@pytest.mark.parametrize("path", DEBUG_FILES)
def test_aranges_and_abbreviations_agree_with_pyelftools(path):
    with open(path, "rb") as f:
        dwarf = ELFFile(f).get_dwarf_info()
        aranges = dwarf.get_aranges()
        assert read_aranges(dwarf) == sorted(
            (e.begin_addr, e.begin_addr + e.length, e.info_offset)
            for e in (aranges.entries if aranges else []) if e.length)
        dwarf.debug_abbrev_sec.stream.seek(0)
        cache = AbbreviationCache(dwarf.debug_abbrev_sec.stream.read())
        served = ELFFile(f).get_dwarf_info()
        cache.serve(served)
        for theirs, ours in list(zip(dwarf.iter_CUs(), served.iter_CUs()))[:5]:
            their_dies, our_dies = list(theirs.iter_DIEs())[:300], list(ours.iter_DIEs())[:300]
            assert [(d.offset, d.tag, d.has_children, dict(d.attributes)) for d in our_dies] == \
                [(d.offset, d.tag, d.has_children, dict(d.attributes)) for d in their_dies]


# How tests/programs/inline_sites.cc is built for the DIE comparison: each compiler and DWARF
# version writes its own forms (clang's DWARF 5: strx, addrx, rnglistx; GCC's: sec_offset into
# .debug_rnglists; DWARF 4: .debug_ranges), GCC's -freorder-blocks-and-partition splits functions
# into hot and cold ranges, -gdwarf64 makes offsets 8 bytes, -fdebug-types-section adds type units.
BUILDS = {"gcc-dwarf4": ["g++", "-gdwarf-4"],
          "gcc-dwarf5-split": ["g++", "-gdwarf-5", "-freorder-blocks-and-partition"],
          "gcc-dwarf64": ["g++", "-gdwarf-5", "-gdwarf64"],
          "gcc-dwarf4-m32": ["g++", "-gdwarf-4", "-m32"],
          "gcc-dwarf5-m32": ["g++", "-gdwarf-5", "-m32"],
          "clang-dwarf4": ["clang++", "-gdwarf-4"],
          "clang-dwarf5": ["clang++", "-gdwarf-5"],
          "clang-dwarf5-m32": ["clang++", "-gdwarf-5", "-m32"],
          "clang-dwarf5-types": ["clang++", "-gdwarf-5", "-fdebug-types-section"]}
INLINE_SITES = pathlib.Path(__file__).parents[1] / "programs" / "inline_sites.cc"
# libc's own debug file: a thousand units, GCC's DWARF 5, compressed sections.
LIBC = pathlib.Path("/lib/x86_64-linux-gnu/libc.so.6")


def _their_ranges(dwarf, die, base):
    """A DIE's ranges through pyelftools, as droidheap read them before it read them itself."""
    attrs = die.attributes
    ranges = []
    if "DW_AT_low_pc" in attrs and "DW_AT_high_pc" in attrs:
        low, high = attrs["DW_AT_low_pc"].value, attrs["DW_AT_high_pc"]
        address = high.form in ("DW_FORM_addr", "DW_FORM_addrx", "DW_FORM_addrx1",
                                "DW_FORM_addrx2", "DW_FORM_addrx3", "DW_FORM_addrx4")
        ranges.append((low, high.value if address else low + high.value))
    lists = dwarf.range_lists() if "DW_AT_ranges" in attrs else None
    for entry in lists.get_range_list_at_offset(attrs["DW_AT_ranges"].value, cu=die.cu) \
            if lists is not None else []:
        if isinstance(entry, BaseAddressEntry):
            base = entry.base_address
        elif entry.is_absolute:
            ranges.append((entry.begin_offset, entry.end_offset))
        else:
            ranges.append((base + entry.begin_offset, base + entry.end_offset))
    return [r for r in ranges if r[0] < r[1]]


def _their_name(die, hops=0):
    attrs = die.attributes
    for name in ("DW_AT_linkage_name", "DW_AT_MIPS_linkage_name"):
        if name in attrs:
            return attrs[name].value.decode("utf-8", "replace")
    for origin in ("DW_AT_abstract_origin", "DW_AT_specification"):
        if origin in attrs and hops < 4:
            found = _their_name(die.get_DIE_from_attribute(origin), hops + 1)
            if found:
                return found
    plain = attrs.get("DW_AT_name")
    return plain.value.decode("utf-8", "replace") if plain is not None else ""


_SCOPE_TAGS = {"DW_TAG_subprogram": 0x2E, "DW_TAG_inlined_subroutine": 0x1D}


def _their_scopes(dwarf, cu):
    """(offset, depth, tag, ranges, name, call file, call line) of a unit's function and
    inlined-call DIEs, its own DIE's ranges first, through pyelftools' DIEs."""
    top = cu.get_top_DIE()
    base = top.attributes["DW_AT_low_pc"].value if "DW_AT_low_pc" in top.attributes else 0
    found = [(top.offset, 0, "unit", _their_ranges(dwarf, top, base))]
    depth = 0
    for die in cu.iter_DIEs():
        if die.is_null():
            depth -= 1
            continue
        if die.tag in _SCOPE_TAGS:
            attrs = die.attributes
            call = [attrs[a].value if a in attrs else None
                    for a in ("DW_AT_call_file", "DW_AT_call_line")]
            found.append((die.offset, depth, _SCOPE_TAGS[die.tag],
                          _their_ranges(dwarf, die, base), _their_name(die), *call))
        if die.has_children:
            depth += 1
    return found


def _our_scopes(info, offset):
    unit = info.unit_at(offset)
    found = [(unit.first_die, 0, "unit", die_ranges(unit, unit.top, unit.low_pc))]
    for position, depth, ranged in find_dies(unit.data, unit.first_die, unit.end,
                                             unit.abbreviations,
                                             {tag: True for tag in _SCOPE_TAGS.values()},
                                             {0x11, 0x12, 0x55}, unit.sizes, info.byteorder):
        tag, values = unit.attributes(position)
        assert ranged == {a: values[a] for a in (0x11, 0x12, 0x55) if a in values}
        call = [values[a][1] if a in values else None for a in (0x58, 0x59)]
        found.append((position, depth, tag, die_ranges(unit, values, unit.low_pc),
                      die_name(unit, values), *call))
    return found


def _compare_units(path, every=1):
    """Every `every`-th unit of the file at `path` read both ways; the count of function and
    inlined-call DIEs compared, of those with ranges and of those with more than one."""
    with open(path, "rb") as f:
        dwarf = ELFFile(f).get_dwarf_info()
        dwarf.debug_abbrev_sec.stream.seek(0)
        info = DebugInfo(dwarf, AbbreviationCache(dwarf.debug_abbrev_sec.stream.read()))
        units = list(dwarf.iter_CUs())
        assert info.offsets() == [cu.cu_offset for cu in units]
        counts = [0, 0, 0]
        for cu in units[::every]:
            ours, theirs = _our_scopes(info, cu.cu_offset), _their_scopes(dwarf, cu)
            assert ours == theirs, (path, cu.cu_offset)
            for scope in ours[1:]:
                counts = [counts[0] + 1, counts[1] + bool(scope[3]),
                          counts[2] + (len(scope[3]) > 1)]
        return counts


def _compare_line_rows(path, every=1):
    """The rows droidheap decodes of every `every`-th unit's line program, against pyelftools'
    decoding of it; the count of rows compared."""
    with open(path, "rb") as f:
        dwarf = ELFFile(f).get_dwarf_info()
        count = 0
        for cu in list(dwarf.iter_CUs())[::every]:
            program = dwarf.line_program_for_CU(cu)
            files, first = file_names(program, cu)
            theirs = [(e.state.address, e.state.end_sequence,
                       files[e.state.file - first] if 0 <= e.state.file - first < len(files)
                       else "", e.state.line)
                      for e in (program.get_entries() if program else []) if e.state]
            assert line_rows(program, files, first) == theirs, (path, cu.cu_offset)
            count += len(theirs)
        return count


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    missing = [tool for tool in ("g++", "clang++") if shutil.which(tool) is None]
    assert not missing, f"scripts/install_test_tools installs {', '.join(missing)}"
    out = tmp_path_factory.mktemp("builds")
    for name, command in BUILDS.items():
        subprocess.run([*command, "-O2", str(INLINE_SITES), "-o", str(out / name)], check=True)
    return out


@pytest.mark.parametrize("build", BUILDS)
def test_function_and_inlined_call_dies_agree_with_pyelftools(builds, build):
    dies, with_ranges, split = _compare_units(builds / build)
    assert dies > 200 and with_ranges > 25 and split > 0


# pyelftools 0.33 cannot read the header of a 64-bit DWARF 5 line program (its file table).
@pytest.mark.parametrize("build", [build for build in BUILDS if build != "gcc-dwarf64"])
def test_line_rows_agree_with_pyelftools(builds, build):
    assert _compare_line_rows(builds / build) > 50


def _libc_debug_file() -> pathlib.Path:
    build_id = ElfFile(LIBC).build_id
    debug = pathlib.Path("/usr/lib/debug/.build-id", build_id[:2], build_id[2:] + ".debug")
    assert debug.is_file(), "no debug file of libc (scripts/install_test_tools installs libc6-dbg)"
    return debug


def test_libc_dies_agree_with_pyelftools():
    dies, with_ranges, split = _compare_units(_libc_debug_file(), every=8)
    assert dies > 1000 and with_ranges > 500 and split > 100


def test_libc_line_rows_agree_with_pyelftools():
    assert _compare_line_rows(_libc_debug_file(), every=40) > 1000
