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


def file_names(dwarf, cu) -> Tuple[List[str], int]:
    """The unit's file table as full paths, and the index its first entry has (DWARF 5 numbers
    files from 0, earlier versions from 1): what DW_AT_call_file and the line program refer to."""
    program = dwarf.line_program_for_CU(cu)
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


def line_rows(dwarf, cu) -> List[Tuple[int, bool, str, int]]:
    program = dwarf.line_program_for_CU(cu)
    if program is None:
        return []
    files, first_file = file_names(dwarf, cu)
    rows = []
    for entry in program.get_entries():
        state = entry.state
        if state is None:
            continue
        index = state.file - first_file
        file = files[index] if 0 <= index < len(files) else ""
        rows.append((state.address, bool(state.end_sequence), file, state.line))
    return rows
