"""The README and docs/ kept true to the code: every flag they name exists, every flag `--help`
shows is documented in docs/usage.md (in the section of its group), docs/usage.md's examples are
command lines droidheap takes, the links resolve, and every command in the README's code blocks
runs here (a phone's with --local).

The flags come from click's command objects (droidheap/cli.py), not from --help's text."""
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
from typing import Dict, List, Set

import click
import pytest

from droidheap.cli import cli
from droidheap.native import host_abi
from tests.conftest import THIS_MACHINES_PROCESSES
from tests.e2e.conftest import PROGRAMS, compile_program, kill_all
from tests.e2e.test_profile import read_line_containing
from tests.requirements import require

pytestmark = THIS_MACHINES_PROCESSES  # --local sessions

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
USAGE = DOCS / "usage.md"

# Flags the docs name that belong to other programs, each with the file that defines it (checked
# to hold it) or, for a program outside this repository, None.
OTHER_PROGRAMS_FLAGS = {
    "--editable": "scripts/install",
    "--venv": "scripts/install",
    "--abis": "scripts/install",
    "--access-times": "scripts/check_packages",
    "--installs": "scripts/check_packages",
    "--variant": None,  # mmdebstrap's
    "--include": None,  # mmdebstrap's
    "--mount": None,  # unshare's
    "--dest": "scripts/build_ndk.sh",
    "--build": "scripts/build_ndk.sh",
    "--out": "scripts/build_wheel",
    "--threads": "bench/overhead.py",
    "--orders": "bench/overhead.py",
    "--no-callgrind": "bench/overhead.py",
    "--no-depths": "bench/overhead.py",
    "--no-stack-sizes": "bench/overhead.py",
    "--stacks": "bench/versus_heapprofd.py",
    "--intervals": "bench/versus_heapprofd.py",
    "--program": "bench/unwind_agreement.py",
    "--args": "bench/unwind_agreement.py",
    "--runs": "bench/overhead.py",
    "--cross-thread-frees": "bench/overhead.py",
    "--workloads": "bench/versus_heapprofd.py",
    "--traces": "bench/host_scale.py",
    "--seconds": "bench/host_scale.py",
    "--keep": "bench/host_scale.py",
    "--port": "tests/adbd/__main__.py",
    "--root": "tests/adbd/__main__.py",
    "--android": "tests/adbd/__main__.py",
    "--perfetto": "tests/adbd/__main__.py",
    "--wait-file": "tests/programs/alloc_sites.c",
    "--shuffle": "tests/conftest.py",
    "--no-rosegment": None,  # lld's
    "--query": None,  # Perfetto's perfetto command
}
_LONG_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _flag_pattern(flag: str) -> re.Pattern:
    return re.compile(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])")


def _help_groups() -> Dict[str, Dict[str, bool]]:
    """{group name as --help shows it: {flag: shown by --help}}: "Device options" (the group's
    own), "Profiling options" (the default command's) and one per other command, by name."""
    # With the group's settings, as cli.make_context would give them (-h beside --help): click
    # keeps the help option a command first built, for every later context.
    root_ctx = click.Context(cli, info_name="droidheap", **cli.context_settings)

    def flags(command, ctx, skip=()):
        found = {}
        for param in command.get_params(ctx):
            if not isinstance(param, click.Option):
                continue
            for flag in param.opts + param.secondary_opts:
                if flag not in skip:
                    found[flag] = not param.hidden
        return found

    groups = {"Device options": flags(cli, root_ctx)}
    for name, command in cli.commands.items():
        ctx = click.Context(command, parent=root_ctx, info_name=name)
        if name == "profile":
            # --help shows its flags as the group's "Profiling options"; its own -h/--help is
            # the command's.
            groups["Profiling options"] = flags(command, ctx, skip=("-h", "--help"))
            groups[name] = {"-h": True, "--help": True}
        else:
            groups[name] = flags(command, ctx)
    return groups


def _usage_sections() -> Dict[str, str]:
    """docs/usage.md's text per group: "## Device options", "## Profiling options" (with its
    subsections), "### `droidheap NAME`" per command."""
    sections, current = {}, None
    for line in USAGE.read_text().splitlines():
        heading = re.match(r"^(#{2,3}) (.*)$", line)
        if heading:
            title = heading[2].strip()
            command = re.fullmatch(r"`droidheap (\w+)`", title)
            if command:
                current = command[1]
            elif heading[1] == "##":
                current = title
            sections.setdefault(current, "")
        if current is not None:
            sections[current] += line + "\n"
    return sections


def _documents() -> List[pathlib.Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_every_flag_help_shows_is_in_usage_md_under_its_group():
    sections = _usage_sections()
    missing = []
    for group, flags in _help_groups().items():
        text = sections.get(group)
        if text is None:
            missing.append(f"docs/usage.md has no section for {group!r}")
            continue
        for flag, shown in flags.items():
            if shown and not _flag_pattern(flag).search(text):
                missing.append(f"{flag} ({group})")
    assert not missing, "undocumented in docs/usage.md: " + ", ".join(missing)


def test_every_flag_the_docs_name_exists():
    ours: Set[str] = {flag for flags in _help_groups().values() for flag in flags}
    unknown = []
    for path in _documents():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for flag in _LONG_FLAG.findall(line):
                if flag not in ours and flag not in OTHER_PROGRAMS_FLAGS:
                    unknown.append(f"{path.relative_to(ROOT)}:{number}: {flag}")
    assert not unknown, "flags that droidheap does not have: " + ", ".join(unknown)


@pytest.mark.parametrize("flag, owner", [(f, o) for f, o in OTHER_PROGRAMS_FLAGS.items() if o])
def test_other_programs_flags_the_docs_name_exist_there(flag, owner):
    assert flag in (ROOT / owner).read_text(), f"{owner} has no {flag}"


def _usage_examples() -> List[str]:
    """docs/usage.md's example commands: the `droidheap ...` in its tables and code blocks (not
    the synopsis, whose [OPTIONS] and ... are placeholders)."""
    examples = []
    for line in USAGE.read_text().splitlines():
        if line.startswith("#"):
            continue  # a heading names a command, with no arguments
        if line.startswith("    "):
            spans = [re.sub(r"\s+#.*$", "", line).strip()]
        else:
            spans = re.findall(r"`(droidheap [^`]*)`", line)
        examples += [span for span in spans
                     if span.startswith("droidheap ") and "[" not in span and "..." not in span]
    return examples


def test_usage_md_examples_parse(tmp_path, monkeypatch):
    """Each example is a command line droidheap's parser takes (the directories it names for
    --symbols, which must exist, are made first)."""
    import shlex
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    examples = _usage_examples()
    assert len(examples) > 50, examples
    wrong = []
    for example in examples:
        args = [os.path.expanduser(arg) for arg in shlex.split(example)[1:]]
        for i, arg in enumerate(args[:-1]):
            if arg == "--symbols":
                pathlib.Path(args[i + 1]).mkdir(parents=True, exist_ok=True)
        try:
            ctx = cli.make_context("droidheap", list(args))
            # The group leaves the command and its arguments (click 8.2+ keeps the command's
            # name apart, in _protected_args).
            rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
            command = cli.commands[rest[0]]
            command.make_context(rest[0], rest[1:], parent=ctx)
        except click.exceptions.Exit:
            pass  # --help, --version
        except click.ClickException as e:
            wrong.append(f"{example}: {e.format_message()}")
    assert not wrong, "examples droidheap would refuse:\n" + "\n".join(wrong)


def _links(path: pathlib.Path) -> List[str]:
    text = re.sub(r"`[^`\n]*`", "", path.read_text())  # not in code spans
    return re.findall(r"\]\(([^)\s]+)\)", text)


def _anchors(path: pathlib.Path) -> Set[str]:
    """The anchors GitHub makes of a Markdown file's headings."""
    anchors = set()
    for line in path.read_text().splitlines():
        heading = re.match(r"^#+ (.*)$", line)
        if heading:
            text = heading[1].strip().lower().replace("`", "")
            anchors.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return anchors


def test_links_from_the_readme_and_docs_resolve():
    broken = []
    readme_targets = set()
    for path in _documents():
        for link in _links(path):
            if re.match(r"^[a-z]+:", link):
                continue  # a web address
            file_part, _, anchor = link.partition("#")
            target = (path.parent / file_part).resolve() if file_part else path
            if path == README:
                readme_targets.add(target)
            if not target.exists():
                broken.append(f"{path.relative_to(ROOT)}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                broken.append(f"{path.relative_to(ROOT)}: {link} (no such heading)")
    assert not broken, "broken links: " + ", ".join(broken)
    # The README leads to every page of docs/.
    unlinked = [p.name for p in DOCS.glob("*.md") if p.resolve() not in readme_targets]
    assert not unlinked, f"docs/ pages the README does not link: {unlinked}"


def readme_commands() -> List[str]:
    """Every line of the README's code blocks (fenced, or indented four spaces after a blank
    line), comments taken off."""
    commands, fenced, in_block, after_blank = [], False, False, True
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced or (line.startswith("    ") and (in_block or after_blank)):
            in_block = not fenced
            code = re.sub(r"(^|\s+)#.*$", "", line).strip()
            if code:
                commands.append(code)
        elif line.strip():
            in_block = False
        after_blank = not line.strip()
    return commands


def test_ci_runs_the_readme_install_and_test_commands():
    """.ci/run is CI on a clean clone: it must run what the README tells a newcomer to run."""
    script = (ROOT / ".ci" / "run").read_text().replace("\\\n", " ")
    # An install checked as it runs is the install: scripts/check_packages OPTION... -- COMMAND.
    ci_commands = [line.strip().split(" -- ")[-1].strip() for line in script.splitlines()
                   if line.strip().startswith("scripts/")]
    readme = readme_commands()
    assert ci_commands[-1] == "scripts/test" and "scripts/install" in ci_commands, ci_commands
    assert set(ci_commands[:-1]) <= {"scripts/install", "scripts/install_test_tools"}, ci_commands
    assert readme[:2] == ["scripts/install && scripts/demo", "scripts/test"], readme[:2]


# The README's placeholders, and what stands for them here.
PHONE_PROGRAM = "/data/local/tmp/prog"
APP_NAME = "com.example.app"
# Run by the test suite's own CI (.ci/run) but not from inside it: `scripts/install` installs the
# machine the test runs on, and `scripts/test` is the suite this test is part of.
NOT_RUN_HERE = {"scripts/install", "scripts/test"}
# Commands that read files on this machine and take no device.
DEVICELESS_COMMANDS = {"symbolize", "report", "diff", "check"}
TIMEOUT_S = 120


class ReadmeRunner:
    """Runs README commands in a directory of their own, on an emulated device of their own, with
    a home of their own:
    `droidheap` as installed beside this Python, `./prog` the demo's program (alloc_sites),
    OUT a new directory for each `-o OUT` and the last one made for the commands that read it."""

    def __init__(self, tmp: pathlib.Path):
        self.tmp = tmp
        # A home of its own: the README's `--symbols ~/…` directories are made there.
        self.home = tmp / "home"
        self.env = dict(os.environ, DROIDHEAP_DEVICE_ROOT=str(tmp / "device"), HOME=str(self.home),
                        PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}"
                             f"{os.environ.get('PATH', '')}")
        compile_program(PROGRAMS / "alloc_sites.c", tmp / "prog", host_abi())
        # An app stands for itself by name: a program of that name on the emulated device.
        shutil.copy(tmp / "prog", tmp / APP_NAME)
        self.outs = 0
        self.last_out = None
        self.ran = []

    def local(self, command: str) -> str:
        """The command as it runs here: with --local where it names a phone, and the
        placeholders filled in."""
        words = command.split()
        if words[0] == "droidheap" and "--local" not in words and \
                words[1] not in DEVICELESS_COMMANDS:
            command = command.replace("droidheap ", "droidheap --local ", 1)
        command = command.replace(PHONE_PROGRAM, "./prog")
        for directory in re.findall(r"--symbols ~/(\S+)", command):
            (self.home / directory).mkdir(parents=True, exist_ok=True)
        if re.search(r"-o OUT\b", command):
            self.outs += 1
            self.last_out = self.tmp / f"out{self.outs}"
            command = re.sub(r"-o OUT\b", f"-o {self.last_out}", command)
        if re.search(r"\bOUT\b", command):
            assert self.last_out is not None, f"{command}: no OUT made before it"
            command = re.sub(r"\bOUT\b", str(self.last_out), command)
        return command

    def run(self, command: str) -> None:
        for part in [p.strip() for p in command.split("&&")]:
            if part in NOT_RUN_HERE:
                continue
            program = part.split()[0]
            if program.startswith("scripts/"):
                self._check(part, subprocess.run(["bash", "-c", part], cwd=ROOT, env=self.env,
                                                  capture_output=True, text=True,
                                                  timeout=TIMEOUT_S))
            elif program == "go":
                require(None if shutil.which("go") else "go is not installed (Debian: golang-go)")
                self._run_here(part)
            elif program == "droidheap" and re.search(rf"-n {re.escape(APP_NAME)}\b", part):
                self._run_with_app(part)
            elif program == "droidheap":
                self._run_here(part)
            else:
                raise AssertionError(f"the README's {part!r}: this test does not know how to run "
                                     f"it here; teach it, or take it out of the code block")

    def _run_here(self, command: str) -> None:
        command = self.local(command)
        self._check(command, subprocess.run(["bash", "-c", command], cwd=self.tmp, env=self.env,
                                            capture_output=True, text=True, timeout=TIMEOUT_S))

    def _run_with_app(self, command: str) -> None:
        """A session by name: the app runs on the emulated device, the session attaches to it,
        the app allocates and exits, and the session ends at -d or, without one, at Ctrl-C."""
        command = self.local(command)
        go = self.tmp / "go"
        go.unlink(missing_ok=True)
        app = session = None
        try:
            app = subprocess.Popen(
                ["droidheap", "--local", "shell", "--", f"./{APP_NAME}", "--wait-file", str(go)],
                cwd=self.tmp, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, start_new_session=True)
            pid = int(read_line_containing(app.stdout, "waiting pid=", 30).split("=")[1])
            session = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=self.tmp,
                                       env=self.env, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, start_new_session=True)
            read_line_containing(session.stderr, f"attached to pid {pid}", 30)
            go.touch()
            assert app.wait(timeout=60) == 0
            if not re.search(r"(^| )-d ", command):
                session.send_signal(signal.SIGINT)
            stdout, stderr = session.communicate(timeout=TIMEOUT_S)
            self._check(command, subprocess.CompletedProcess(command, session.returncode,
                                                             stdout, stderr))
        finally:
            kill_all(app, session)

    def _check(self, command: str, result: subprocess.CompletedProcess) -> None:
        # `check` exits 1 when a site grew past the bound: that is it working, not failing.
        allowed = (0, 1) if command.startswith("droidheap check ") else (0,)
        assert result.returncode in allowed, (
            f"{command} exited with {result.returncode}:\n{result.stdout[-2000:]}"
            f"{result.stderr[-2000:]}")
        self.ran.append(command)


def test_every_readme_command_runs_here(tmp_path):
    commands = readme_commands()
    assert commands, "no command found in the README's code blocks"
    runner = ReadmeRunner(tmp_path)
    for command in commands:
        runner.run(command)
    expected = [part.strip() for command in commands for part in command.split("&&")
                if part.strip() not in NOT_RUN_HERE]
    assert len(runner.ran) == len(expected), (runner.ran, expected)
    # Each profile wrote its outputs where the README says to look.
    for i in range(1, runner.outs + 1):
        out = tmp_path / f"out{i}"
        assert (out / "report.html").is_file() and (out / "symbolized-trace").is_file(), \
            sorted(p.name for p in out.iterdir())
        assert list(out.glob("heap_dump.*.pb.gz")), sorted(p.name for p in out.iterdir())
