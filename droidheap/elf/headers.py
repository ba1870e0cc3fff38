"""An ELF file's headers read straight from its bytes: the section table and the GNU build id.

Opening a file for a repeat run (its symbols come from the cache) needs only these; pyelftools
builds an object per section, and parses the hash tables, to answer the same (5 ms a file).
"""
import dataclasses
import mmap
import pathlib
import struct
from typing import Dict, Iterator, Optional, Tuple

SHT_NOTE, SHT_NOBITS, PT_NOTE = 7, 8, 4
SHF_COMPRESSED = 0x800
NT_GNU_BUILD_ID = 3
EM_386, EM_ARM, EM_X86_64, EM_AARCH64, EM_RISCV = 3, 40, 62, 183, 243

# (ELF header: e_machine, e_phoff, e_shoff, e_phentsize, e_phnum, e_shentsize, e_shnum,
#  e_shstrndx), section header (name, type, flags, offset, size), program header (type, offset,
#  filesz), by class.
_LAYOUTS = {
    2: ("16x2xH4x8xQQ4x2xHHHHH", "IIQ8xQQ", "I4xQ8x8xQ"),
    1: ("16x2xH4x4xII4x2xHHHHH", "III4xII", "II4x4xI"),
}


# Sections pyelftools reads for DWARF: where one has no bytes in the file it makes zeros of its
# size (a debug file's .eh_frame is such; its size is the library's).
_READ_AS_ZEROS = (".debug", ".zdebug", ".eh_frame")


class NotElf(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Section:
    name: str
    type: int
    flags: int
    offset: int
    size: int


@dataclasses.dataclass
class Headers:
    machine: int
    sections: Dict[str, Section]  # by name, the first of a name
    notes: Tuple[Tuple[int, int], ...]  # (offset, size) of PT_NOTE segments
    little_endian: bool
    is_64: bool = True
    every_section: Tuple[Section, ...] = ()  # in file order, several of a name too

    def inflated_sizes(self, data) -> Iterator[Tuple[str, int, int]]:
        """(name, size claimed, bytes in the file standing for it) of each section pyelftools
        would make more of than the file holds: a compressed one (SHF_COMPRESSED: its Elf_Chdr's
        size; `.zdebug_*`: the size after "ZLIB") from its compressed bytes, and a debug section
        with no bytes in the file, read as that many zeros, from the whole file."""
        order = "<" if self.little_endian else ">"
        # Elf64_Chdr / Elf32_Chdr: ch_type, (ch_reserved,) ch_size, then ch_addralign.
        chdr, chdr_size = (order + "I4xQ", 24) if self.is_64 else (order + "II", 12)
        for section in self.every_section:
            if section.flags & SHF_COMPRESSED and section.type != SHT_NOBITS:
                yield section.name, self._unpack(chdr, data, section)[1], section.size - chdr_size
            elif section.name.startswith(".zdebug") and section.type != SHT_NOBITS:
                magic, size = self._unpack(">4sQ", data, section)
                yield section.name, size if magic == b"ZLIB" else 0, section.size - 12
            elif section.type == SHT_NOBITS and section.name.startswith(_READ_AS_ZEROS):
                yield section.name, section.size, len(data)

    @staticmethod
    def _unpack(layout: str, data, section: Section) -> tuple:
        if struct.calcsize(layout) > section.size or section.offset + section.size > len(data):
            raise NotElf(f"section {section.name} is shorter than its header or runs past the "
                         "end of the file")
        return struct.unpack_from(layout, data, section.offset)

    def data(self, data, name: str) -> Optional[bytes]:
        """The bytes of an uncompressed section with contents, else None."""
        section = self.sections.get(name)
        if section is None or section.type == SHT_NOBITS or section.flags & SHF_COMPRESSED:
            return None
        if section.offset + section.size > len(data):
            raise NotElf(f"section {name} runs past the end of the file")
        return bytes(data[section.offset:section.offset + section.size])

    def build_id(self, data) -> str:
        """The GNU build id in hex, or "". Only a note owned by "GNU" is one: SystemTap's SDT
        notes (libstdc++, python3, ...) use the same type number. From the note sections, else
        (no section headers) the PT_NOTE segments."""
        places = [(s.offset, s.size) for s in self.sections.values() if s.type == SHT_NOTE] \
            or list(self.notes)
        for offset, size in places:
            for owner, kind, desc in _notes(data, offset, size, self.little_endian):
                if owner == b"GNU" and kind == NT_GNU_BUILD_ID:
                    return desc.hex()
        return ""


def _notes(data, offset: int, size: int, little: bool) -> Iterator[Tuple[bytes, int, bytes]]:
    order = "<" if little else ">"
    pos, end = offset, min(offset + size, len(data))
    while pos + 12 <= end:
        name_size, desc_size, kind = struct.unpack_from(order + "III", data, pos)
        pos += 12
        name = bytes(data[pos:pos + name_size]).rstrip(b"\0")
        pos += (name_size + 3) & ~3
        desc = bytes(data[pos:pos + desc_size])
        pos += (desc_size + 3) & ~3
        if pos > end:
            return
        yield name, kind, desc


def read_headers(data) -> Headers:
    """`data`: the whole file (bytes or an mmap). Raises NotElf for what is not a sane ELF."""
    if len(data) < 64 or bytes(data[:4]) != b"\x7fELF" or data[4] not in _LAYOUTS \
            or data[5] not in (1, 2):
        raise NotElf("not an ELF file")
    little = data[5] == 1
    order = "<" if little else ">"
    header, section_layout, segment_layout = (order + layout for layout in _LAYOUTS[data[4]])
    (machine, phoff, shoff, phentsize, phnum, shentsize, shnum,
     shstrndx) = struct.unpack_from(header, data, 0)
    try:
        raw = [struct.unpack_from(section_layout, data, shoff + i * shentsize)
               for i in range(shnum)] if shoff else []
        notes = tuple((offset, size) for kind, offset, size in (
            struct.unpack_from(segment_layout, data, phoff + i * phentsize)
            for i in range(phnum)) if kind == PT_NOTE) if phoff else ()
    except struct.error:
        raise NotElf("its headers run past the end of the file") from None
    names, named = b"", bool(raw) and shstrndx < len(raw)
    if named:
        _, _, _, names_at, names_size = raw[shstrndx]
        names = bytes(data[names_at:names_at + names_size])
    every = []
    for name_at, kind, flags, offset, size in raw:
        end = names.find(b"\0", name_at)
        name = names[name_at:end if end >= 0 else None].decode("utf-8", "replace")
        every.append(Section(name, kind, flags, offset, size))
    sections: Dict[str, Section] = {}
    for section in every if named else ():
        sections.setdefault(section.name, section)
    return Headers(machine, sections, notes, little, data[4] == 2, tuple(every))


def file_build_id(path: pathlib.Path) -> str:
    """The build id of the regular file at `path` (a link there is not followed), or "" when it
    has none or is no ELF file."""
    try:
        if path.is_symlink() or not path.is_file():
            return ""
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return ""
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return read_headers(data).build_id(data)
    except (OSError, ValueError):  # ValueError: NotElf, or an empty file mmap refuses
        return ""
