"""DWARF `.debug_line`: the file names of a compilation unit and the rows (address, file, line)
of its line program, searchable by address."""
import bisect
from typing import List, Optional, Tuple


class LineTable:
    """Rows (address, is_end, file, line) sorted so that bisecting finds the row covering an
    address; an end_sequence row sorts before a row starting at the same address."""

    def __init__(self, rows: List[Tuple[int, bool, str, int]]):
        rows.sort(key=lambda row: (row[0], not row[1]))
        self.addresses = [row[0] for row in rows]
        self.rows = rows

    def find(self, address: int) -> Optional[Tuple[str, int]]:
        i = bisect.bisect_right(self.addresses, address) - 1
        if i < 0 or self.rows[i][1]:
            return None
        return self.rows[i][2], self.rows[i][3]


def file_names(program, cu) -> Tuple[List[str], int]:
    """The file table of a unit's line program as full paths, and the index its first entry has
    (DWARF 5 numbers files from 0, earlier versions from 1): what DW_AT_call_file and the line
    program refer to."""
    if program is None:
        return [], 1
    header = program.header
    version = header.version
    dirs = [d.decode("utf-8", "replace") for d in header.include_directory]
    comp_dir_attr = cu.get_top_DIE().attributes.get("DW_AT_comp_dir")
    comp_dir = comp_dir_attr.value.decode("utf-8", "replace") if comp_dir_attr else ""
    files = []
    for entry in header.file_entry:
        name = entry.name.decode("utf-8", "replace")
        # DWARF 5 numbers directories from 0 (the compilation directory); earlier versions
        # reserve 0 for it and count include_directory from 1.
        if version >= 5:
            directory = dirs[entry.dir_index] if entry.dir_index < len(dirs) else ""
        else:
            directory = dirs[entry.dir_index - 1] if 0 < entry.dir_index <= len(dirs) else comp_dir
        files.append(name if name.startswith("/") or not directory
                     else f"{directory.rstrip('/')}/{name}")
    return files, 0 if version >= 5 else 1


def uleb(data: bytes, pos: int) -> Tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def sleb(data: bytes, pos: int) -> Tuple[int, int]:
    value, end = uleb(data, pos)
    bits = 7 * (end - pos)
    return (value - (1 << bits) if value & (1 << (bits - 1)) else value), end


def line_rows(program, files: List[str], first_file: int) -> List[Tuple[int, bool, str, int]]:
    """The rows of a unit's line program. Decoded here rather than by pyelftools, which builds
    an object per row: this is where symbolizing a big library spends its time."""
    if program is None:
        return []
    h = program.header
    program.stream.seek(program.program_start_offset)
    data = program.stream.read(program.program_end_offset - program.program_start_offset)
    byteorder = "little" if program.structs.little_endian else "big"
    opcode_base, line_base, line_range = h.opcode_base, h.line_base, h.line_range
    step = h.minimum_instruction_length
    const_add = (255 - opcode_base) // line_range * step
    arguments = h.standard_opcode_lengths
    raw = []  # (address, is_end, file index, line)
    address, file, line = 0, 1, 1
    pos, end = 0, len(data)
    while pos < end:
        op = data[pos]
        pos += 1
        if op >= opcode_base:  # special: advance address and line, append a row
            delta = op - opcode_base
            address += delta // line_range * step
            line += line_base + delta % line_range
            raw.append((address, False, file, line))
        elif op == 0:  # extended
            length, pos = uleb(data, pos)
            sub, next_pos = data[pos] if length else 0, pos + length
            if sub == 1:  # DW_LNE_end_sequence
                raw.append((address, True, file, line))
                address, file, line = 0, 1, 1
            elif sub == 2:  # DW_LNE_set_address
                address = int.from_bytes(data[pos + 1:next_pos], byteorder)
            pos = next_pos  # define_file, set_discriminator, vendor ones: nothing we use
        elif op == 1:  # DW_LNS_copy
            raw.append((address, False, file, line))
        elif op == 2:  # DW_LNS_advance_pc
            value, pos = uleb(data, pos)
            address += value * step
        elif op == 3:  # DW_LNS_advance_line
            value, pos = sleb(data, pos)
            line += value
        elif op == 4:  # DW_LNS_set_file
            file, pos = uleb(data, pos)
        elif op == 8:  # DW_LNS_const_add_pc
            address += const_add
        elif op == 9:  # DW_LNS_fixed_advance_pc
            address += int.from_bytes(data[pos:pos + 2], byteorder)
            pos += 2
        else:  # column, negate_stmt, basic_block, prologue/epilogue, isa, unknown: skipped
            for _ in range(arguments[op - 1] if op - 1 < len(arguments) else 0):
                _, pos = uleb(data, pos)
    names = {}
    rows = []
    for address, is_end, index, number in raw:
        if index not in names:
            i = index - first_file
            names[index] = files[i] if 0 <= i < len(files) else ""
        rows.append((address, is_end, names[index], number))
    return rows
