"""The `shell:` and `shell,v2:` services (shell_protocol.h, services.txt).

`shell,v2,ARGS:COMMAND` frames both directions as packets: one id byte, a little-endian uint32
length, the data. Device to host: stdout (1), stderr (2), exit (3, one byte: the exit code);
host to device: stdin (0), close stdin (4), window size (5, ignored). `shell:COMMAND` is the old
raw stream: stdout and stderr mixed, no exit code, the stream closed at exit.

Both run pipes, never a pty (a `pty` argument is accepted but not honoured): nothing here is
interactive. An empty COMMAND runs an interactive `sh` on those pipes.

One ShellSession per stream, created and run by the stream's service thread, with one more
thread per output pipe and one feeding stdin.
"""
import os
import signal
import struct
import subprocess
import threading

from .device_root import DeviceRoot
from .transport import Stream, StreamClosed

ID_STDIN, ID_STDOUT, ID_STDERR, ID_EXIT, ID_CLOSE_STDIN, ID_WINDOW_SIZE = range(6)
_PACKET_HEADER = struct.Struct("<BI")


def encode_packet(packet_id: int, data: bytes) -> bytes:
    return _PACKET_HEADER.pack(packet_id, len(data)) + data


def _argv(command: str):
    return ["/system/bin/sh", "-c", command] if command else ["/system/bin/sh"]


class ShellSession:
    def __init__(self, device: DeviceRoot, stream: Stream, command: str, protocol_v2: bool):
        self._stream = stream
        self._v2 = protocol_v2
        self._process = device.popen(
            _argv(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if protocol_v2 else subprocess.STDOUT)

    def run(self) -> None:
        pumps = [threading.Thread(target=self._pump, args=(self._process.stdout, ID_STDOUT))]
        if self._v2:
            pumps.append(threading.Thread(target=self._pump, args=(self._process.stderr, ID_STDERR)))
        for pump in pumps:
            pump.start()
        threading.Thread(target=self._feed_stdin, daemon=True).start()
        for pump in pumps:
            pump.join()
        code = self._process.wait()
        if self._v2:
            # A signal's death is reported as a shell reports it: 128 + the signal number.
            self._stream.write(encode_packet(ID_EXIT, bytes([(128 - code if code < 0 else code) & 0xFF])))

    def _pump(self, pipe, packet_id: int) -> None:
        try:
            while True:
                data = pipe.read1(64 * 1024)
                if not data:
                    return
                self._stream.write(encode_packet(packet_id, data) if self._v2 else data)
        except StreamClosed:
            self._kill()
        finally:
            pipe.close()

    def _feed_stdin(self) -> None:
        stdin = self._process.stdin
        try:
            if not self._v2:
                while data := self._stream.read_some():
                    stdin.write(data)
                    stdin.flush()
            else:
                while True:
                    packet_id, length = _PACKET_HEADER.unpack(self._stream.read_exact(_PACKET_HEADER.size))
                    data = self._stream.read_exact(length)
                    if packet_id == ID_STDIN:
                        stdin.write(data)
                        stdin.flush()
                    elif packet_id == ID_CLOSE_STDIN:
                        break
        except StreamClosed:
            pass
        except OSError:
            return  # the command no longer reads its stdin
        finally:
            try:
                stdin.close()
            except OSError:
                pass
        if self._stream.closed and self._process.poll() is None:
            self._kill()  # the host went away: as adbd does, end the command

    def _kill(self) -> None:
        try:
            os.killpg(self._process.pid, signal.SIGHUP)
        except OSError:
            pass


def serve_v2(device: DeviceRoot, stream: Stream, rest: str) -> None:
    """rest: "v2,ARGS:COMMAND" (the service name was "shell,")."""
    options, _, command = rest.partition(":")
    if "v2" not in options.split(","):
        return  # an unknown shell variant: the stream is closed
    ShellSession(device, stream, command, protocol_v2=True).run()


def serve_raw(device: DeviceRoot, stream: Stream, command: str) -> None:
    ShellSession(device, stream, command, protocol_v2=False).run()
