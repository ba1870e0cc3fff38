"""Long-running device programs over adb, held by this process: droidheapd and a profiled program.

Each runs in its own `shell,v2` stream opened through the adb server by this process (not by an
`adb` child), so that whatever ends this process -- Ctrl-C, SIGTERM, SIGKILL, a crash -- closes the
stream, and adbd then ends the program (SIGHUP, and its stdin reaches end-of-file: droidheapd stops
on either, with a final dump). The device pid comes first on stderr, written by the wrapper script
(`exec` keeps it the program's pid), and is not passed on.

A ShellStream's reader thread delivers output to a callback, in chunks as it comes (adb_shell's
PacketReader: never a packet's claimed length at once), and the exit code when the program ends;
everything else runs on the thread that owns the stream.
"""
import shlex
import struct
import sys
import threading
import time
from typing import Callable, Optional

import adbutils

from droidheap.device.adb_connection import adb_errors
from droidheap.device.adb_shell import (CLOSE_STDIN, EXIT, HEADER, STDERR, STDIN, STDOUT,
                                        PacketReader)
from droidheap.device.base import DaemonProcess
from droidheap.errors import DroidheapError
from droidheap.terminal import unescaped

_PID_TIMEOUT_S = 15.0
_PID_PREFIX = b"droidheap-pid:"
# Stderr held while the pid line is awaited: that line is some 25 bytes, and comes first.
_PID_WAIT_MAX_BYTES = 64 * 1024
# droidheapd writes a line per client and per warning: a long session's log is some hundreds of
# KiB. Past this, its stream is closed (it stops, with a final dump) rather than kept growing.
DAEMON_LOG_MAX_BYTES = 64 << 20


def pid_announcing(script: str) -> str:
    """`script` (one shell command line, ending in the program's own `exec`) with the device pid
    written first on stderr."""
    return f"echo droidheap-pid:$$ >&2; {script}"


class ShellStream:
    """One `shell,v2` command line (made with pid_announcing): output to callbacks, the exit code
    once it has ended."""

    def __init__(self, device: adbutils.AdbDevice, script: str,
                 on_stdout: Callable[[bytes], None], on_stderr: Callable[[bytes], None],
                 keep_stdin_open: bool = False, max_output: Optional[int] = None):
        """`max_output`: the bytes of output the program may send (None: any, each passed on);
        past them, the stream is closed (`overflowed`), and the program with it."""
        self._on_stdout = on_stdout
        self._on_stderr = on_stderr
        self._output_left = max_output
        self.exit_code: Optional[int] = None
        self.link_lost = False  # the stream broke before the program's exit code came
        self.overflowed = False  # it was closed for sending more than max_output
        self.pid: Optional[int] = None
        self._pending_stderr = b""
        self._ended = threading.Event()
        with adb_errors("cannot start a program over adb"):
            self._connection = device.open_transport(timeout=None)
            self._connection.send_command(f"shell,v2,raw:{script}")
            self._connection.check_okay()
            if not keep_stdin_open:
                # Nothing is fed to the program: its stdin reads end-of-file, not a hang.
                self._connection.send(HEADER.pack(CLOSE_STDIN, 0))
        threading.Thread(target=self._read, name="adb-shell-stream", daemon=True).start()

    def _read(self) -> None:
        reader = PacketReader(self._connection.conn)
        try:
            while True:
                packet_id, length = reader.header()
                if packet_id == EXIT:
                    self.exit_code = reader.exact(1)[0] if length else 255
                    return
                if self._output_left is not None:
                    self._output_left -= length
                    if self._output_left < 0:
                        self.overflowed = True
                        self.exit_code = 255
                        return
                for piece in reader.pieces(length):
                    if packet_id == STDOUT:
                        self._on_stdout(piece)
                    elif packet_id == STDERR:
                        self._stderr(piece)
        except (adbutils.AdbError, OSError, EOFError, struct.error):
            if self.exit_code is None:
                self.link_lost = True
                self.exit_code = 255  # the link is gone: so is the program, as far as we know
        finally:
            self._connection.close()
            self._ended.set()

    def _stderr(self, data: bytes) -> None:
        if self.pid is not None:
            self._on_stderr(data)
            return
        # Until the pid line: whole lines, the pid's kept, others (the loader's, the shell's)
        # passed on.
        self._pending_stderr += data
        *lines, self._pending_stderr = self._pending_stderr.split(b"\n")
        passed = []
        for line in lines:
            number = line[len(_PID_PREFIX):].strip()
            if self.pid is None and line.startswith(_PID_PREFIX) and number.isdigit():
                self.pid = int(number)
            else:
                passed.append(line + b"\n")
        if self._pending_stderr and (self.pid is not None
                                     or len(self._pending_stderr) > _PID_WAIT_MAX_BYTES):
            passed.append(self._pending_stderr)  # no pid line is that long
            self._pending_stderr = b""
        if passed:
            self._on_stderr(b"".join(passed))

    def release_held(self) -> None:
        """Lets a program started with held_script go on: its shell reads the line it waits for,
        and the program then finds its stdin at end-of-file, as one never held does."""
        with adb_errors("cannot start a program over adb"):
            self._connection.send(HEADER.pack(STDIN, 1) + b"\n" + HEADER.pack(CLOSE_STDIN, 0))

    def wait(self, timeout_s: Optional[float] = None) -> Optional[int]:
        self._ended.wait(timeout_s)
        return self.exit_code if self._ended.is_set() else None

    def device_pid(self) -> int:
        deadline = time.monotonic() + _PID_TIMEOUT_S
        while self.pid is None and not self._ended.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.pid is None:
            raise DroidheapError("the program started over adb did not say its pid")
        return self.pid

    def close(self) -> None:
        self._connection.close()


class AdbProgram:
    """A program started for profiling: what subprocess.Popen offers, about the device process.
    Its output is passed on to this process's stdout and stderr."""

    def __init__(self, device, script: str, held: bool = False):
        self._device = device
        # The program's own output, as `adb shell` shows it: its bytes, control characters and all.
        self._stream = ShellStream(device.adb, held_script(script) if held else script,
                                   _write_to(unescaped(sys.stdout)),
                                   _write_to(unescaped(sys.stderr)), keep_stdin_open=held)

    def release(self) -> None:
        """Lets a program started held go on to exec (see held_script)."""
        self._stream.release_held()

    @property
    def pid(self) -> int:
        return self._stream.device_pid()

    def poll(self) -> Optional[int]:
        return self._stream.exit_code

    def wait(self, timeout: Optional[float] = None) -> int:
        while True:
            code = self._stream.wait(0.1 if timeout is None else timeout)
            if code is not None or timeout is not None:
                return code
            # Short waits: a KeyboardInterrupt gets through between them.

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            self._device.run_script(f"kill -{int(signum)} {self.pid}")


class AdbDaemon(DaemonProcess):
    """droidheapd over adb; its output (stdout and stderr together) is its log."""

    def __init__(self, device, script: str):
        self._device = device
        self._log = bytearray()
        self._lock = threading.Lock()
        # Its stdin stays open as long as this process holds the stream: its lifeline.
        self._stream = ShellStream(device.adb, script, self._append, self._append,
                                   keep_stdin_open=True, max_output=DAEMON_LOG_MAX_BYTES)

    def _append(self, data: bytes) -> None:
        with self._lock:
            self._log += data

    def poll(self) -> Optional[int]:
        return _signal_as_negative(self._stream.exit_code)

    def wait(self, timeout_s: float) -> Optional[int]:
        return _signal_as_negative(self._stream.wait(timeout_s))

    def signal(self, signum: int) -> None:
        if self.poll() is None:
            self._device.run_privileged(f"kill -{int(signum)} {self._stream.device_pid()}")

    def log(self) -> str:
        with self._lock:
            text = self._log.decode(errors="replace")
        # The last line, which a failure is reported with.
        if self._stream.overflowed:
            text += (f"\ndroidheapd's output on {self._device.serial} passed "
                     f"{DAEMON_LOG_MAX_BYTES} bytes: droidheap closed its stream\n")
        elif self._stream.link_lost:
            text += f"\nthe adb link to {self._device.serial} was lost\n"
        return text


def _signal_as_negative(code: Optional[int]) -> Optional[int]:
    """adbd reports a program a signal killed as 128 + the signal; droidheapd's own exit codes
    are small, so such a code is the signal, negative as subprocess has it."""
    if code is not None and 128 < code <= 128 + 64:
        return 128 - code
    return code


def _write_to(stream) -> Callable[[bytes], None]:
    def write(data: bytes) -> None:
        stream.buffer.write(data)
        stream.buffer.flush()
    return write


def held_script(script: str) -> str:
    """`script` (made with pid_announcing) held after its pid is said, until AdbProgram.release:
    the shell reads a line of its stdin first. The pid is known before the program runs, so that
    droidheapd can take that process, and no other of its name, before it starts. Never released
    (droidheap gone, the link lost), it reads end-of-file and ends without running the program."""
    announce, _, rest = script.partition("; ")
    return f"{announce}; read -r _ || exit 125; {rest}"


def exec_script(argv, assignments: str = "") -> str:
    """A shell command line that replaces the shell with argv (so its pid stays the shell's), with
    `assignments` (NAME=WORD, the words already quoted) exported to it: `NAME=WORD exec` would
    not export a new NAME in every sh."""
    return f"{'export ' + assignments + '; ' if assignments else ''}exec {shlex.join(argv)}"
