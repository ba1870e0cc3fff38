"""The symbol cache: a repeat run looks nothing up in ELF or DWARF, a changed file is looked up
afresh, and a damaged cache only costs time."""
import os

from droidheap.symbol_cache import SymbolCache
from droidheap.symbolizer import Symbolizer


def _symbolize(program, cache, calls):
    symbolizer = Symbolizer(cache=cache, host_paths=True)
    original = symbolizer._look_up

    def counting(elf, basename, rel_pcs):
        calls.append(list(rel_pcs))
        return original(elf, basename, rel_pcs)
    symbolizer._look_up = counting
    return symbolizer.symbolize(str(program.path), program.build_id,
                                program.return_addresses.values())


def test_a_repeat_run_reads_every_frame_from_the_cache(program, tmp_path):
    cache = SymbolCache(tmp_path)
    calls = []
    first = _symbolize(program, cache, calls)
    again = _symbolize(program, cache, calls)
    assert first.lines and again.lines == first.lines
    assert calls == [sorted(set(program.return_addresses.values())), []]
    assert (tmp_path / f"{program.build_id}.json").is_file()


def test_a_changed_file_is_looked_up_again(program, tmp_path):
    cache = SymbolCache(tmp_path)
    calls = []
    _symbolize(program, cache, calls)
    stat = program.path.stat()
    os.utime(program.path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    _symbolize(program, cache, calls)
    assert calls[1] == calls[0]


def test_a_damaged_cache_file_is_ignored_and_rewritten(program, tmp_path):
    (tmp_path / f"{program.build_id}.json").write_text("{not json")
    calls = []
    module = _symbolize(program, SymbolCache(tmp_path), calls)
    assert module.lines and calls[0]
    assert _symbolize(program, SymbolCache(tmp_path), calls).lines == module.lines
    assert calls[1] == []
