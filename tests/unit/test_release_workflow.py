"""The release workflow (.github/workflows/release.yml) runs what this repository has: the scripts
and files its `run:` steps name exist, it builds both wheels, and it publishes through PyPI's
trusted publishing. (GitHub runs it; its steps are commands that run here too.)"""
import os
import pathlib
import re
from typing import List

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def run_steps() -> List[str]:
    """The text of each `run:` step, its block's lines included."""
    steps, lines = [], WORKFLOW.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("run:"):
            indent = len(line) - len(line.lstrip())
            block = [line.split("run:", 1)[1]]
            for following in lines[i + 1:]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                block.append(following)
            steps.append("\n".join(block))
    return steps


def test_its_run_steps_name_scripts_and_files_that_exist():
    steps = run_steps()
    named = {path for step in steps
             for path in re.findall(r"(?<![\w/.$-])((?:scripts|tests)/[\w./-]+)", step)}
    assert any(path.startswith("scripts/") for path in named), steps
    missing = [path for path in named if not (ROOT / path).is_file()]
    assert not missing, f"release.yml names what is not here: {missing}"
    scripts = [path for path in named if path.startswith("scripts/")]
    assert all(os.access(ROOT / path, os.X_OK) for path in scripts), scripts


def test_it_builds_both_wheels_and_publishes_them_with_trusted_publishing():
    text = WORKFLOW.read_text()
    builds = re.findall(r"scripts/build_wheel\b.*", "\n".join(run_steps()))
    assert sorted(build.split()[-1] for build in builds) == ["any", "linux"], builds
    assert re.search(r'tags: \["v\*"\]', text)
    assert "pypa/gh-action-pypi-publish@" in text
    assert "id-token: write" in text
    assert re.search(r"environment:\s*\n\s*name: pypi", text)
