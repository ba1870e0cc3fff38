"""droidheap/program_allocator.py: why a program's allocations cannot reach droidheap, read from
its ELF file in blocks (as through an adb device); and the ASAN_OPTIONS a preloaded program gets."""
import pathlib
import shutil
import subprocess

import pytest

from droidheap import program_allocator
from droidheap.program_allocator import asan_options, unseen_allocations

MAIN = "#include <stdlib.h>\nint main(void) { free(malloc(10)); return 0; }\n"
OWN_MALLOC = """#include <stddef.h>
static char pool[1 << 16]; static size_t used;
void* malloc(size_t n) { void* p = pool + used; used += (n + 15) & ~(size_t)15; return p; }
void free(void* p) { (void)p; }
"""


def build(tmp_path: pathlib.Path, name: str, flags=(), sources=(MAIN,),
          compiler="cc") -> pathlib.Path:
    if shutil.which(compiler) is None:
        pytest.skip(f"no {compiler}")
    paths = []
    for i, text in enumerate(sources):
        paths.append(tmp_path / f"{name}{i}.c")
        paths[-1].write_text(text)
    program = tmp_path / name
    try:
        subprocess.run([compiler, *flags, *map(str, paths), "-o", str(program)], check=True,
                       capture_output=True)
    except subprocess.CalledProcessError as e:
        pytest.skip(f"{compiler} {' '.join(flags)} builds nothing here: {e.stderr[-200:]!r}")
    return program


def reads(path: pathlib.Path, counted=None):
    data = path.read_bytes()

    def read_range(offset, size):
        if counted is not None:
            counted.append(offset)
        return data[offset:offset + size]
    return read_range, len(data)


def test_a_dynamically_linked_program_keeps_nothing_from_droidheap(tmp_path):
    assert unseen_allocations(*reads(build(tmp_path, "plain"))) is None


def test_a_statically_linked_program_is_said_so(tmp_path):
    why = unseen_allocations(*reads(build(tmp_path, "static", ["-static"])))
    assert why == "statically linked: no library can take its calls to malloc"


def test_an_allocator_linked_into_the_program_is_said_so(tmp_path):
    program = build(tmp_path, "own", sources=(MAIN, OWN_MALLOC))
    assert unseen_allocations(*reads(program)) == \
        "its malloc is its own, an allocator linked into it, which takes every call"


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_address_sanitizer_is_named_whether_linked_in_or_loaded(tmp_path, compiler):
    """gcc loads its runtime as a library, clang links it into the program."""
    program = build(tmp_path, "asan", ["-fsanitize=address"], compiler=compiler)
    assert unseen_allocations(*reads(program)) == (
        "built with AddressSanitizer, which checks every memory access, the profiler's too: "
        "profile a build without -fsanitize=address")


def test_a_sanitizer_whose_malloc_is_linked_in_is_named(tmp_path):
    program = build(tmp_path, "tsan", ["-fsanitize=thread"], compiler="clang")
    assert unseen_allocations(*reads(program)) == (
        "built with ThreadSanitizer, whose malloc, linked into it, takes every call: profile a "
        "build without -fsanitize=thread")


def test_a_sanitizer_loaded_as_a_library_after_droidheap_s_is_no_reason(tmp_path):
    """gcc's ThreadSanitizer runtime is a library: droidheap's comes first and forwards to it."""
    assert unseen_allocations(*reads(build(tmp_path, "tsan", ["-fsanitize=thread"],
                                           compiler="gcc"))) is None


def test_the_file_is_read_in_few_blocks_and_not_past_a_bound(tmp_path, monkeypatch):
    program = build(tmp_path, "own", sources=(MAIN, OWN_MALLOC))
    offsets = []
    assert unseen_allocations(*reads(program, offsets)) is not None
    assert len(offsets) == len(set(offsets)) <= 4, offsets  # each block fetched once
    monkeypatch.setattr(program_allocator, "_MAX_BLOCKS", 0)
    assert unseen_allocations(*reads(program)) is None  # read too much: no guess


@pytest.mark.parametrize("data", [b"", b"#!/bin/sh\necho\n", b"\x7fELF" + b"\xff" * 60,
                                  b"\x7fELF\x02\x01\x01" + b"\0" * 200],
                         ids=["empty", "script", "garbage", "no segments"])
def test_what_is_no_elf_file_or_a_broken_one_gives_no_reason(data):
    assert unseen_allocations(lambda offset, size: data[offset:offset + size], len(data)) is None


def test_the_user_s_asan_options_come_after_droidheap_s_so_theirs_win():
    assert asan_options(None) == "verify_asan_link_order=0"
    assert asan_options("") == "verify_asan_link_order=0"
    assert asan_options("verify_asan_link_order=1:detect_leaks=0") == \
        "verify_asan_link_order=0:verify_asan_link_order=1:detect_leaks=0"
