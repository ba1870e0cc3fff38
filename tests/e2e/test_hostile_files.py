"""droidheapd opens the files a profiled process maps, by the paths in its maps, and the process
chooses what lies at those paths: a FIFO there must not stall the daemon, and a file that is not
the one mapped (a symlink, another file) must not lend the mapping its symbols. Either costs that
mapping its symbols, never the session (tests/programs/replaced_library.c sets the traps)."""
import subprocess

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from tests.e2e.conftest import daemon_pids, kill_all
from tests.e2e.test_profile import single_process
from tests.e2e.trace_check import read_dumps, totals_by_leaf_function

# replaced_library.c's counts.
BEFORE, BEFORE_SIZE, THROUGH, THROUGH_SIZE = 100, 128, 1000, 4096
# The mapping's path, as the daemon read the maps before or after the program renamed its trap
# over the file.
COPY_PATHS = ("/libcopy.so", "/libcopy.so (deleted)")
# The program runs in well under a second; a stalled daemon would hold the session for minutes.
SESSION_TIMEOUT_S = 60


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


def run_to_the_end(cli, device_root, program, mode, tmp_path):
    """Profiles `program` in `mode` at -i 1; (stdout, stderr, exit code) of the session, which
    must end within SESSION_TIMEOUT_S."""
    trap_dir = tmp_path / "trap"
    trap_dir.mkdir()
    session = cli.start("--local", "-o", tmp_path / "out", "-i", "1", "--", program, mode,
                        trap_dir)
    try:
        stdout, stderr = session.communicate(timeout=SESSION_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the session did not end within {SESSION_TIMEOUT_S} s ({mode})")
    finally:
        kill_all(session)
        for pid in daemon_pids(device_root):  # a daemon stuck on the trap outlives its session
            subprocess.run(["kill", "-9", str(pid)], check=False)
    return stdout, stderr, session.returncode


@pytest.mark.parametrize("mode", ["fifo", "symlink", "other"])
def test_a_mapped_file_replaced_by_a_trap_costs_only_its_symbols(cli, abi, programs, device_root,
                                                                 tmp_path, mode):
    program = programs("replaced_library")
    stdout, stderr, code = run_to_the_end(cli, device_root, program, mode, tmp_path)
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
