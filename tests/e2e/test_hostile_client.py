"""droidheapd treats every client as untrusted: junk on its socket is refused, and the session's
real client is profiled exactly all the same."""
import os
import socket
import struct
import time

from tests.e2e.conftest import kill_all
from tests.e2e.test_profile import assert_sites, read_line_containing, single_process
from tests.e2e.trace_check import assert_trace_processor_agrees, totals_by_leaf_function

HELLO = struct.Struct("<IIIiQ")  # magic, version, size, pid, flags (wire_protocol.h)
HELLO_MAGIC = 0x50414548


def connect(socket_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(socket_path)
    return s


def reply_status(s):
    data = s.recv(64)
    return struct.unpack_from("<IIII", data)[3] if len(data) >= 16 else None


def test_junk_clients_are_refused_and_the_session_goes_on(cli, alloc_program, device_root,
                                                          tmp_path):
    go = tmp_path / "go"
    out = tmp_path / "out"
    session = cli.start("--local", "-o", out, "-i", "1", "--", alloc_program, "--wait-file", go)
    try:
        read_line_containing(session.stdout, "waiting pid=", 60)
        socket_path = str(device_root / "dev" / "socket" / "heapprofd")

        connect(socket_path).close()  # connects and leaves
        with connect(socket_path) as s:  # a few bytes of nothing
            s.sendall(b"abc")
        with connect(socket_path) as s:  # wrong magic
            s.sendall(HELLO.pack(0xdeadbeef, 1, HELLO.size, os.getpid(), 0))
            assert reply_status(s) == 2
        with connect(socket_path) as s:  # forged fds: /dev/null is not our /proc/self/mem
            null = os.open("/dev/null", os.O_RDONLY)
            socket.send_fds(s, [HELLO.pack(HELLO_MAGIC, 1, HELLO.size, os.getpid(), 0)],
                            [null, null])
            os.close(null)
            assert reply_status(s) == 2
        with connect(socket_path) as s:  # a genuine process that is not a target
            maps = os.open("/proc/self/maps", os.O_RDONLY)
            mem = os.open("/proc/self/mem", os.O_RDONLY)
            socket.send_fds(s, [HELLO.pack(HELLO_MAGIC, 1, HELLO.size, os.getpid(), 0)],
                            [maps, mem])
            os.close(maps)
            os.close(mem)
            assert reply_status(s) == 1
        silent = connect(socket_path)  # says nothing: the daemon gives up on it
        time.sleep(0.5)
        go.touch()
        _, stderr = session.communicate(timeout=120)
        silent.close()
        assert session.returncode == 0, stderr
    finally:
        kill_all(session)
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", alloc_program)), 1)
    assert_trace_processor_agrees(out, alloc_program)
