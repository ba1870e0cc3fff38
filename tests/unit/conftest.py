"""Unit-test fixtures shared across files."""
import pytest

from fixtures_trace import compile_program


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    """The symbolization test program (fixtures_trace.compile_program), built once per module."""
    compiled = compile_program(tmp_path_factory.mktemp("prog"))
    if compiled is None:
        pytest.skip("gcc or objdump is not installed")
    return compiled
