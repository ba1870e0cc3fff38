"""Reading ELF files and their DWARF for the symbolizer: symbols, line tables, inlined calls,
separate debug files."""
