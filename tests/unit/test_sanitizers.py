"""The native unit tests again, under AddressSanitizer with UndefinedBehaviorSanitizer and under
ThreadSanitizer: any report fails the test (the builds do not recover from undefined behaviour,
and TSan is told to exit non-zero)."""
import os
import subprocess

import pytest

from tests.unit.test_native import NATIVE_TESTS

# Made early by the worker that takes this module (the sanitized builds, which
# e2e/test_sanitizers.py's daemons come from), while the device tests' worker runs its others
# (tests/conftest.py).
MADE_EARLY = True

SANITIZERS = {"asan-ubsan": "address,undefined", "tsan": "thread"}
ENVIRONMENT = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:halt_on_error=1",
               "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
               "TSAN_OPTIONS": "halt_on_error=1:exitcode=66:second_deadlock_stack=1"}
# What a sanitizer's process cannot be asked, and why.
NOT_UNDER = {
    # Under TSan a thread's first frame sits ~770 KiB below the top of its stack (TSan's own
    # thread state): the 64 KiB copy never reaches it, and reaching it is what the test checks
    # of its one thread. Its unwinding is checked under ASan, and the daemon's threads under TSan
    # end to end (tests/e2e/test_sanitizers.py).
    ("tsan", "dwarf_unwinder_test"),
}


@pytest.mark.parametrize("sanitizer, name", [(s, n) for s in SANITIZERS for n in NATIVE_TESTS
                                              if (s, n) not in NOT_UNDER])
def test_native_unit_under_sanitizer(sanitized_build, sanitizer, name):
    build = sanitized_build(SANITIZERS[sanitizer])
    result = subprocess.run([build / "tests" / name], capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, **ENVIRONMENT))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
    assert "runtime error" not in result.stderr and "Sanitizer" not in result.stderr, \
        result.stderr[-6000:]
