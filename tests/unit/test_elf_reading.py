"""What droidheap reads of ELF and DWARF by itself, for speed (headers.py, the aranges and the
abbreviation tables), agrees with pyelftools on this machine's files of every ABI it has: 64- and
32-bit x86, arm64."""
import fnmatch
import glob
import mmap
import os
import pathlib

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_E_MACHINE

from droidheap.elf.abbrev_table import AbbreviationCache
from droidheap.elf.dwarf_index import read_aranges
from droidheap.elf.elf_file import ElfFile
from droidheap.elf.headers import NotElf, read_headers


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
