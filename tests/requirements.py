"""What a test needs from this machine, said once: where it is missing the test is skipped with
the reason, and in CI (where `CI` is set, and scripts/install and scripts/install_test_tools have
put everything in place) it fails instead, so that a check can never pass there by not running."""
import os
from typing import Optional

import pytest


def require(missing: Optional[str]) -> None:
    """`missing`: why the test cannot run here, or None when it can."""
    if missing is None:
        return
    if os.environ.get("CI"):
        pytest.fail(missing)
    pytest.skip(missing)
