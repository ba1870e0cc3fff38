"""bench/'s scripts as the unit tests see them: a figures module loaded by its file (bench/ is no
package), and a script's --help run as a user would run it."""
import importlib.util
import pathlib
import subprocess
import sys
from types import ModuleType

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"


def load(name: str) -> ModuleType:
    """bench/<name>.py, loaded as the module `name`."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def help_text(script: str) -> str:
    """What `python bench/<script> --help` prints; fails the test when it does not exit 0."""
    result = subprocess.run([sys.executable, str(BENCH / script), "--help"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout
