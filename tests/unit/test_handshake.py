"""droidheapd's handshake across protocol versions and ABIs (wire_protocol.h), against the host
build's daemon accepting every process: a version 1 hello (no ABI) and a newer, longer one are both
read exactly; a hello naming a 32-bit ABI is accepted and logged as such; an ABI the daemon does
not know is refused with its own status; the daemon says a client records only once the client
says so (protocol 6), or at once for an older client; it reads an AllocRecord's registers packed
from protocol 7 and all 33 before."""
import contextlib
import ctypes
import fcntl
import mmap
import os
import pathlib
import socket
import struct
import subprocess
import time

import pytest

HELLO_V1 = struct.Struct("<IIIiQ")  # magic, version, size, pid, flags
HELLO_V2 = struct.Struct("<IIIiQII")  # ... abi, reserved
HELLO_MAGIC = 0x50414548
ACCEPTED, BAD_HELLO, UNSUPPORTED_ABI = 0, 2, 4
ABI_X86_64, ABI_X86, ABI_ARMEABI_V7A = 1, 3, 4  # registers.h's Abi
BLOCK_TIMEOUT_US = 2_500_300
BLOCK_TIMEOUT_OFFSET = 28  # DaemonReply::block_timeout_us
SHMEM_SIZE_OFFSET = 40  # DaemonReply::shmem_size
RECORD_ALLOC, RECORD_RECORDING = 1, 7  # wire_protocol.h
ALLOC_RECORD = struct.Struct("<QQQQQII")  # sequence, address, sizes, stack_pointer, tid, stack_size
WRITE_POS_OFFSET = 72  # RingBufferMetadata::write_pos
STACK_MATCHES_SIZE_OFFSET = 328  # DaemonReply::stack_matches_size
STACK_MATCHES_SIZE = 256 * 2048  # StackMatches::kSize
RING_COUNT_OFFSET = 336  # DaemonReply::ring_count
SHMEM_SIZE = 1 << 20


@pytest.fixture
def daemon(native_build, tmp_path, request):
    """A running droidheapd that accepts every process, with the options a test's indirect
    parameter adds; yields (socket path, log reader)."""
    socket_path = tmp_path / "heapprofd"
    log = tmp_path / "droidheapd.log"
    with open(log, "w") as log_file:
        process = subprocess.Popen(
            [str(native_build / "droidheapd"), "--socket", str(socket_path),
             "--output", str(tmp_path / "trace"), "--all", "--shmem-size", str(SHMEM_SIZE),
             "--block-timeout-us", str(BLOCK_TIMEOUT_US), *getattr(request, "param", ())],
            stderr=log_file, env=dict(os.environ, DROIDHEAP_STACK_LOG=str(tmp_path / "stacks")))
    try:
        deadline = time.monotonic() + 10
        while "droidheapd: listening" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield socket_path, log.read_text
    finally:
        process.terminate()
        process.wait(timeout=30)


@contextlib.contextmanager
def connected(socket_path: pathlib.Path, hello: bytes, reply_size: int = 56):
    """Sends `hello` with this process's own maps and mem fds; yields the socket (open), the
    reply's first `reply_size` bytes (56: a version 3 reply's) and the fds that came with it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(socket_path))
        fds = [os.open("/proc/self/maps", os.O_RDONLY), os.open("/proc/self/mem", os.O_RDONLY)]
        try:
            socket.send_fds(s, [hello], fds)
        finally:
            for fd in fds:
                os.close(fd)
        data, received, _, _ = socket.recv_fds(s, reply_size, 4)
        try:
            assert len(data) == reply_size, data
            yield s, data, received
        finally:
            for fd in received:
                os.close(fd)


def exchange(socket_path: pathlib.Path, hello: bytes):
    """The reply to `hello`, and whether a shared memory fd came with it."""
    with connected(socket_path, hello) as (_, data, fds):
        return data, len(fds) == 1


def handshake(socket_path: pathlib.Path, hello: bytes):
    """The reply's status to `hello`, and whether a shared memory fd came with it."""
    data, got_fd = exchange(socket_path, hello)
    return struct.unpack_from("<IIII", data)[3], got_fd


def logged(log, text: str) -> bool:
    """Whether the daemon logs `text` within a few seconds (it logs after it has replied)."""
    deadline = time.monotonic() + 5
    while text not in log():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def hello_v2(abi: int, size: int = HELLO_V2.size, version: int = 2) -> bytes:
    return HELLO_V2.pack(HELLO_MAGIC, version, size, os.getpid(), 0, abi, 0).ljust(size, b"\0")


def test_accepts_a_version_1_hello_as_the_daemons_own_abi(daemon):
    socket_path, log = daemon
    hello = HELLO_V1.pack(HELLO_MAGIC, 1, HELLO_V1.size, os.getpid(), 0)
    start = time.monotonic()
    assert handshake(socket_path, hello) == (ACCEPTED, True)
    assert time.monotonic() - start < 1.5  # read exactly, not after the 2 s handshake timeout
    assert logged(log, f"connected pid={os.getpid()} abi=")


@pytest.mark.parametrize("abi, name", [(ABI_X86, "x86"), (ABI_ARMEABI_V7A, "armeabi-v7a")])
def test_accepts_a_32_bit_client_and_says_which_abi(daemon, abi, name):
    socket_path, log = daemon
    assert handshake(socket_path, hello_v2(abi)) == (ACCEPTED, True)
    assert logged(log, f"connected pid={os.getpid()} abi={name} ")
    if name == "armeabi-v7a":
        assert logged(log, "ARM EHABI tables (.ARM.exidx)")  # the user is told how it unwinds


def test_refuses_an_abi_it_does_not_know(daemon):
    socket_path, log = daemon
    assert handshake(socket_path, hello_v2(99)) == (UNSUPPORTED_ABI, False)
    assert logged(log, "unknown to this droidheapd")


def test_reads_a_newer_clients_longer_hello_exactly(daemon):
    socket_path, _ = daemon
    assert handshake(socket_path, hello_v2(ABI_X86, size=HELLO_V2.size + 24)) == (ACCEPTED, True)


def test_refuses_a_hello_claiming_an_absurd_size(daemon):
    socket_path, _ = daemon
    assert handshake(socket_path, HELLO_V2.pack(HELLO_MAGIC, 2, 1 << 20, os.getpid(), 0,
                                                ABI_X86, 0)) == (BAD_HELLO, False)


@pytest.mark.parametrize("version, timeout", [(2, 2501), (3, BLOCK_TIMEOUT_US)])
def test_block_timeout_goes_in_microseconds_from_version_3_and_milliseconds_before(
        daemon, version, timeout):
    socket_path, _ = daemon
    data, _ = exchange(socket_path, hello_v2(ABI_X86, version=version))
    assert struct.unpack_from("<I", data, BLOCK_TIMEOUT_OFFSET)[0] == timeout


def write_record(ring_fd: int, record_type: int, body: bytes = b"", ring_count: int = 1,
                 ring_index: int = 0):
    """Writes a record into a ring buffer as a client does (ring_buffer.h), in the buffer's
    version's layout; `body` a multiple of 8 bytes. The fd holds `ring_count` rings (ring_set.h):
    into the one at `ring_index`."""
    page = mmap.PAGESIZE
    each = os.fstat(ring_fd).st_size // ring_count
    with mmap.mmap(ring_fd, each, offset=ring_index * each) as ring:
        version, _, data_size, commit_key = struct.unpack_from("<IIQQ", ring, 0)
        write_pos = struct.unpack_from("<Q", ring, WRITE_POS_OFFSET)[0]
        at = page + write_pos % data_size
        header = 16 if version >= 3 else 8
        size = header + len(body)
        if version >= 3:
            struct.pack_into("<II", ring, at + 8, size, record_type)
        else:
            struct.pack_into("<I", ring, at + 4, record_type)
        ring[at + header:at + size] = body
        struct.pack_into("<Q", ring, WRITE_POS_OFFSET, write_pos + size)
        if version >= 3:  # committed
            struct.pack_into("<Q", ring, at, write_pos ^ commit_key)
        else:
            struct.pack_into("<I", ring, at, size)


@pytest.mark.parametrize("version", [8, 9])
def test_a_client_gets_the_buffer_its_protocol_writes(daemon, version):
    """Protocol 9 writes without a lock (ring buffer version 3, a random commit key); an older
    client goes on writing version 2's records, under its lock, and is read as such."""
    socket_path, log = daemon
    with connected(socket_path, hello_v2(ABI_X86_64, version=version)) as (sock, _, fds):
        with mmap.mmap(fds[0], mmap.PAGESIZE) as ring:
            ring_version, _, _, commit_key = struct.unpack_from("<IIQQ", ring, 0)
        assert ring_version == (3 if version >= 9 else 2)
        assert (commit_key != 0) == (version >= 9)
        write_record(fds[0], RECORD_RECORDING)
        sock.send(b"w")
        assert logged(log, f"recording pid={os.getpid()}")


@pytest.mark.parametrize("version", [9, 11, 13, 14])
def test_a_client_of_protocol_14_gets_the_stack_matches(daemon, version):
    """From protocol 14 the reply's third fd is the stack matches (stack_matches.h), sized by
    DaemonReply::stack_matches_size and sealed; an older client is sent none (protocols 10 to 13
    read tables of other layouts: 12 and 13 named a stack word by its address, not its offset)."""
    socket_path, _ = daemon
    with connected(socket_path, hello_v2(ABI_X86_64, version=version),
                   STACK_MATCHES_SIZE_OFFSET + 8) as (_, data, fds):
        size = struct.unpack_from("<Q", data, STACK_MATCHES_SIZE_OFFSET)[0]
        if version < 14:
            assert size == 0 and len(fds) == 2  # the buffer and the totals
            return
        assert size == STACK_MATCHES_SIZE and len(fds) == 3
        assert os.fstat(fds[2]).st_size == size
        seals = fcntl.fcntl(fds[2], fcntl.F_GET_SEALS)
        assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW


@pytest.mark.parametrize("version", [12, 13])
def test_a_client_of_protocol_13_gets_rings_for_its_threads(daemon, version):
    """From protocol 13 the buffer fd holds DaemonReply::ring_count rings, one after the other,
    each with its metadata page and an equal share of --shmem-size: 8, or as many as let a share
    hold the largest record in its half (4 of 1 MiB with 64 KiB stacks). The daemon reads every
    ring. An older client gets the one buffer it knows."""
    socket_path, log = daemon
    with connected(socket_path, hello_v2(ABI_X86_64, version=version),
                   RING_COUNT_OFFSET + 8) as (sock, data, fds):
        count = struct.unpack_from("<I", data, RING_COUNT_OFFSET)[0]
        shmem_size = struct.unpack_from("<Q", data, SHMEM_SIZE_OFFSET)[0]
        assert count == (4 if version >= 13 else 1)
        assert shmem_size == os.fstat(fds[0]).st_size == count * (mmap.PAGESIZE +
                                                                  SHMEM_SIZE // count)
        # The last ring's record is read too.
        write_record(fds[0], RECORD_RECORDING, ring_count=count, ring_index=count - 1)
        sock.send(b"w")
        assert logged(log, f"recording pid={os.getpid()}")


@pytest.mark.parametrize("daemon", [("--interval", "1")], indirect=True)
@pytest.mark.parametrize("version", [14, 15])
def test_at_interval_1_a_client_of_protocol_15_gets_rings_too(daemon, version):
    """At -i 1 an older client keeps no table of its blocks, which is what sends a block's free to
    its allocation's ring: it gets one ring. From protocol 15 it keeps the blocks of its rings
    other than 0 there, and gets rings as at any interval."""
    socket_path, _ = daemon
    with connected(socket_path, hello_v2(ABI_X86_64, version=version),
                   RING_COUNT_OFFSET + 8) as (_, data, _):
        assert struct.unpack_from("<I", data, RING_COUNT_OFFSET)[0] == (4 if version >= 15 else 1)


def test_a_client_records_from_its_recording_record_on(daemon):
    socket_path, log = daemon
    with connected(socket_path, hello_v2(ABI_X86_64, version=6)) as (sock, _, fds):
        assert logged(log, f"connected pid={os.getpid()} abi=")
        # Set up, not yet recording (its hooks and heaps come after the reply): the user is not
        # told it is profiled.
        time.sleep(0.3)
        assert f"recording pid={os.getpid()}" not in log()
        write_record(fds[0], RECORD_RECORDING)
        write_record(fds[0], RECORD_RECORDING)  # said once, whatever the client repeats
        sock.send(b"w")  # a wake-up byte
        assert logged(log, f"recording pid={os.getpid()}")
        time.sleep(0.2)
        assert log().count(f"recording pid={os.getpid()}") == 1


def test_a_client_older_than_protocol_6_records_from_the_reply(daemon):
    socket_path, log = daemon
    assert handshake(socket_path, hello_v2(ABI_X86_64, version=5))[0] == ACCEPTED
    assert logged(log, f"recording pid={os.getpid()}")


@pytest.mark.parametrize("version", [6, 7])
def test_reads_the_registers_of_an_alloc_record_as_the_clients_version_lays_them_out(
        daemon, tmp_path, version):
    """x86_64: version 7 sends rbx rbp rsp r12..r15 rip packed, version 6 all 33 by number. The
    sample's first frame is its pc, wherever the rest of this made-up stack leads."""
    socket_path, log = daemon
    pc = ctypes.cast(ctypes.CDLL(None).malloc, ctypes.c_void_p).value
    sp = 0x1000
    if version == 7:
        registers = [0, 0, sp, 0, 0, 0, 0, pc]
    else:
        registers = [0] * 33
        registers[7], registers[16] = sp, pc
    record = ALLOC_RECORD.pack(1, 0x5000, 16, 16, sp, 1, 0)
    record += struct.pack(f"<{len(registers)}Q", *registers)
    with connected(socket_path, hello_v2(ABI_X86_64, version=version)) as (sock, _, fds):
        assert logged(log, f"connected pid={os.getpid()} abi=")
        write_record(fds[0], RECORD_ALLOC, record)
        sock.send(b"w")
        deadline = time.monotonic() + 5
        stacks = tmp_path / "stacks"
        while not (stacks.exists() and stacks.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert stacks.read_text().startswith(f"{os.getpid()} 1 {pc:x}"), stacks.read_text()
