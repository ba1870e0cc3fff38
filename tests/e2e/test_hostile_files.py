"""droidheapd opens the files a profiled process maps, by the paths in its maps, and the process
chooses what lies at those paths: a FIFO there must not stall the daemon, and a file that is not
the one mapped (a symlink, another file) must not lend the mapping its symbols. Either costs that
mapping its symbols, never the session (tests/programs/replaced_library.c sets the traps). A
directory of the path swapped for a link must not lead the daemon to open what lies behind it: a
FIFO there is not even opened (its blocked writer would wake)."""
import contextlib
import pathlib
import subprocess
import sys
import time

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from tests.e2e.conftest import daemon_pids, finished, kill_all
from tests.e2e.test_profile import single_process
from tests.e2e.trace_check import read_dumps, totals_by_leaf_function

# replaced_library.c's counts.
BEFORE, BEFORE_SIZE, THROUGH, THROUGH_SIZE = 100, 128, 1000, 4096
# The mapping's path, as the daemon read the maps before or after the program renamed its trap
# over the file.
COPY_PATHS = ("/libcopy.so", "/libcopy.so (deleted)")
# The program runs in well under a second; a stalled daemon would hold the session for minutes.
SESSION_TIMEOUT_S = 60
# What the "dirlink" program's copy's directory becomes a link to, and the FIFOs there: one per
# path the maps give the copy.
FIFOS_DIR = "fifos"
FIFO_NAMES = ("libcopy.so", "libcopy.so (deleted)")
# A writer on a FIFO: it says it is about to open it, then sleeps in open() until a reader comes.
WRITER = ("import os, sys; print('opening', flush=True); os.open(sys.argv[1], os.O_WRONLY); "
          "print('woken', flush=True)")


def copy_mappings(trace):
    """(path, build id) of every mapping of the copy in the trace."""
    strings, build_ids, found = {}, {}, []
    for packet in pb.Trace.FromString(trace.read_bytes()).packet:
        data = packet.interned_data
        strings.update((s.iid, s.str.decode()) for s in data.mapping_paths)
        build_ids.update((s.iid, s.str) for s in data.build_ids)
        for m in data.mappings:
            path = "/" + "/".join(strings.get(i, "") for i in m.path_string_ids)
            if path.endswith(COPY_PATHS):
                found.append((path, build_ids.get(m.build_id, b"")))
    return found


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat ("S": sleeping)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "gone"
    return stat[stat.rindex(")") + 2]


@contextlib.contextmanager
def blocked_writers(fifos_dir):
    """Makes FIFO_NAMES in `fifos_dir`, each with a writer sleeping in open() once this yields
    them (Popen objects); kills the writers on leaving."""
    fifos_dir.mkdir()
    writers = []
    try:
        for name in FIFO_NAMES:
            fifo = fifos_dir / name
            subprocess.run(["mkfifo", fifo], check=True)
            writers.append(subprocess.Popen([sys.executable, "-c", WRITER, fifo],
                                            stdout=subprocess.PIPE, text=True))
            assert writers[-1].stdout.readline() == "opening\n"
            # Past its line, the writer sleeps only in open().
            deadline = time.monotonic() + 10
            while process_state(writers[-1].pid) != "S" and time.monotonic() < deadline:
                time.sleep(0.01)
            assert process_state(writers[-1].pid) == "S", fifo
        yield writers
    finally:
        for writer in writers:
            writer.kill()
            writer.communicate()


def run_to_the_end(cli, device_root, program, mode, trap_dir, tmp_path):
    """Profiles `program` in `mode` at -i 1 with its traps in `trap_dir`; (stdout, stderr, exit
    code) of the session, which must end within SESSION_TIMEOUT_S."""
    session = cli.start("--local", "-o", tmp_path / "out", "-i", "1", "--", program, mode,
                        trap_dir)
    try:
        stdout, stderr = finished(session, SESSION_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the session did not end within {SESSION_TIMEOUT_S} s ({mode})")
    finally:
        kill_all(session)
        for pid in daemon_pids(device_root):  # a daemon stuck on the trap outlives its session
            subprocess.run(["kill", "-9", str(pid)], check=False)
    return stdout, stderr, session.returncode


@pytest.mark.parametrize("mode", ["fifo", "symlink", "other", "dirlink"])
def test_a_mapped_file_replaced_by_a_trap_costs_only_its_symbols(cli, abi, programs, device_root,
                                                                 tmp_path, mode):
    program = programs("replaced_library")
    trap_dir = tmp_path / "trap"
    trap_dir.mkdir()
    writers = (blocked_writers(trap_dir / FIFOS_DIR) if mode == "dirlink"
               else contextlib.nullcontext([]))
    with writers as blocked:
        stdout, stderr, code = run_to_the_end(cli, device_root, program, mode, trap_dir, tmp_path)
        # The session is over, every sample unwound: had the daemon opened a FIFO behind the link,
        # its writer would have woken.
        woken = [writer.args[-1] for writer in blocked if writer.poll() is not None]
    assert not woken, f"opened through a directory swapped for a link: {woken}"
    assert code == 0 and "replaced" in stdout and "done" in stdout, stdout + stderr
    raw = tmp_path / "out" / "raw-trace"
    # Every allocation is in the profile, those made through the trapped mapping too.
    per_function = single_process(totals_by_leaf_function(raw, program))
    assert per_function["site_before_replacing"].allocated == BEFORE * BEFORE_SIZE
    (dumps,) = read_dumps(raw).values()
    through = sum(sample.self_allocated for stack, sample in dumps[-1]
                  if any(path.endswith(COPY_PATHS) for path, _ in stack))
    assert through == THROUGH * THROUGH_SIZE, per_function
    # Nothing at that path was read as the mapped file: no build id (libc's, through the link or
    # the other file).
    mappings = copy_mappings(raw)
    assert mappings and all(build_id == b"" for _, build_id in mappings), mappings


def test_a_mapped_file_truncated_after_the_daemon_read_it_costs_nothing(cli, abi, programs,
                                                                        device_root, tmp_path):
    """The program cuts a copy of its code short after its unwind tables were read, then samples
    at new pcs in it: the daemon holds the tables in its own memory (a mapping of the file would
    fault, SIGBUS, and end every process's profile)."""
    program = programs("truncated_library")
    copy_dir = tmp_path / "copy"
    copy_dir.mkdir()
    session = cli.start("--local", "-o", tmp_path / "out", "-i", "1", "--", program, copy_dir)
    try:
        stdout, stderr = finished(session, SESSION_TIMEOUT_S)
    finally:
        kill_all(session)
    assert session.returncode == 0 and "truncated" in stdout and "done" in stdout, stdout + stderr
    assert "killed by signal" not in stderr, stderr
    per_function = single_process(totals_by_leaf_function(tmp_path / "out" / "raw-trace",
                                                          program))
    (dumps,) = read_dumps(tmp_path / "out" / "raw-trace").values()
    through = sum(sample.self_allocated for stack, sample in dumps[-1]
                  if any(path.endswith("/libcopy.so") for path, _ in stack))
    assert through == 2000 * 4096, per_function
