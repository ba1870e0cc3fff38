"""System properties of the test device: the emulator device's store (`<root>/properties`,
"key=value" lines, replaced atomically; read by getprop and by the emulation layer), written
only here, as init's property service writes them on a phone.

`setprop` (bin/setprop) sends "key\\0value" over /dev/socket/property_service; the answer is
"0" or an error line. As on Android: ro.* properties are set once; the shell user may set only
debug.*, log.* and persist.debug.* (setting heapprofd.* needs root); root's ctl.start and ctl.stop
(bin/start, bin/stop) only set the service's init.svc.<name> state, as no service runs here.

Owned by the server; one thread accepts and answers; `write` is serialised by a lock.
"""
import os
import pathlib
import socket
import struct
import threading
from typing import Dict

# The emulator device's store, one definition of its format (stdlib only, like this adbd).
from droidheap.device.local import read_properties, write_properties

_SHELL_PREFIXES = ("debug.", "log.", "persist.debug.")
_MAX_REQUEST = 4096
_SERVICE_CONTROLS = {"ctl.start": "running", "ctl.stop": "stopped"}


class PropertyService:
    def __init__(self, root: pathlib.Path, socket_path: pathlib.Path):
        self._root = root
        self._socket_path = socket_path
        self._lock = threading.Lock()

    def read(self) -> Dict[str, str]:
        return read_properties(self._root)

    def write(self, updates: Dict[str, str]) -> None:
        with self._lock:
            write_properties(self._root, updates)

    def _answer(self, request: bytes, uid: int) -> str:
        key, sep, value = request.decode(errors="replace").partition("\0")
        if not sep or not key or "=" in key or "\n" in key or "\n" in value:
            return "invalid property request"
        if key.startswith("ro.") and key in self.read():
            return f"{key} is read-only"
        if uid != 0 and not key.startswith(_SHELL_PREFIXES):
            return f"permission denied for uid {uid}"
        if key in _SERVICE_CONTROLS:  # init's: start or stop a service (nothing runs here)
            self.write({f"init.svc.{value}": _SERVICE_CONTROLS[key]})
            return "0"
        self.write({key: value})
        return "0"

    def start(self) -> None:
        self._socket_path.unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self._socket_path))
        os.chmod(self._socket_path, 0o666)
        server.listen(16)
        threading.Thread(target=self._serve, args=(server,), daemon=True).start()

    def _serve(self, server: socket.socket) -> None:
        while True:
            client, _ = server.accept()
            with client:
                try:
                    creds = client.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                              struct.calcsize("3i"))
                    _, uid, _ = struct.unpack("3i", creds)
                    client.settimeout(5)
                    request = b""
                    while len(request) < _MAX_REQUEST:
                        chunk = client.recv(_MAX_REQUEST - len(request))
                        if not chunk:
                            break
                        request += chunk
                    client.sendall(self._answer(request, uid).encode())
                except OSError:
                    continue
