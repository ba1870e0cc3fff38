"""DWARF `.debug_line`: the file names of a compilation unit and the rows (address, file, line)
of its line program, searchable by address."""
import bisect
import operator
from typing import List, Optional, Tuple


class LineTable:
    """Rows (address, is_end, file, line) sorted so that bisecting finds the row covering an
    address; an end_sequence row sorts before a row starting at the same address."""

    def __init__(self, rows: List[Tuple[int, bool, str, int]]):
        # Two stable sorts keyed in C: end rows first, then by address, order kept otherwise.
        rows.sort(key=operator.itemgetter(1), reverse=True)
        rows.sort(key=operator.itemgetter(0))
        self.addresses = list(map(operator.itemgetter(0), rows))
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
    # What each special opcode adds to the address and to the line.
    address_steps = [(op - opcode_base) // line_range * step for op in range(256)]
    line_steps = [line_base + (op - opcode_base) % line_range for op in range(256)]
    arguments = h.standard_opcode_lengths
    names = {}

    def name(index: int) -> str:
        if index not in names:
            i = index - first_file
            names[index] = files[i] if 0 <= i < len(files) else ""
        return names[index]

    rows = []
    address, line, file = 0, 1, name(1)
    pos, end = 0, len(data)
    while pos < end:
        op = data[pos]
        pos += 1
        if op >= opcode_base:  # special: advance address and line, append a row
            address += address_steps[op]
            line += line_steps[op]
            rows.append((address, False, file, line))
        elif op == 5:  # DW_LNS_set_column, nearly every row of GCC's: its operand skipped
            while data[pos] & 0x80:
                pos += 1
            pos += 1
        elif op == 6:  # DW_LNS_negate_stmt
            pass
        elif op == 1:  # DW_LNS_copy
            rows.append((address, False, file, line))
        elif op == 0:  # extended
            length, pos = uleb(data, pos)
            sub, next_pos = data[pos] if length else 0, pos + length
            if sub == 1:  # DW_LNE_end_sequence
                rows.append((address, True, file, line))
                address, line, file = 0, 1, name(1)
            elif sub == 2:  # DW_LNE_set_address
                address = int.from_bytes(data[pos + 1:next_pos], byteorder)
            pos = next_pos  # define_file, set_discriminator, vendor ones: nothing we use
        elif op == 2:  # DW_LNS_advance_pc
            value, pos = uleb(data, pos)
            address += value * step
        elif op == 3:  # DW_LNS_advance_line
            value, pos = sleb(data, pos)
            line += value
        elif op == 4:  # DW_LNS_set_file
            index, pos = uleb(data, pos)
            file = name(index)
        elif op == 8:  # DW_LNS_const_add_pc
            address += const_add
        elif op == 9:  # DW_LNS_fixed_advance_pc
            address += int.from_bytes(data[pos:pos + 2], byteorder)
            pos += 2
        else:  # basic_block, prologue/epilogue, isa, unknown: skipped
            for _ in range(arguments[op - 1] if op - 1 < len(arguments) else 0):
                _, pos = uleb(data, pos)
    return rows
