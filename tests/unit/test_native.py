"""Runs the native unit tests (ndk_client/tests/*_test.cc) that need no arguments."""
import subprocess

import pytest

NATIVE_TESTS = ["ring_buffer_test", "heap_tracker_test", "live_allocations_test",
                "trace_writer_test", "sampled_addresses_test", "dwarf_cfi_test",
                "dwarf_cfi_own_binary_test", "dwarf_expression_test"]


@pytest.mark.parametrize("name", NATIVE_TESTS)
def test_native_unit(native_build, name):
    result = subprocess.run([str(native_build / "tests" / name)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
