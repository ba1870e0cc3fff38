"""init's property service of the test devices, on /dev/socket/property_service, speaking what
bionic's `__system_property_set` speaks (protocol 2, libc/bionic/system_property_set.cpp): a
uint32 command (0x00020001), the name and the value each as a uint32 length and its bytes; the
answer is one int32, 0 or an error code. Android's own `setprop` speaks it on the Android test
device, the emulator device's bin/setprop speaks it too.

Where values are kept is the device's: the emulator device's store (`<root>/properties`, read by
its getprop and by the emulation layer; `TextStore`) or a bionic property area (prop_area.py),
read by Android's own programs. Either way written only here, as init writes them on a phone.

As on Android: ro.* properties are set once; the shell user may set only debug.*, log.* and
persist.debug.* (setting heapprofd.* needs root); root's ctl.start and ctl.stop go to init
(`Init`): the emulator device only records the service's state (init.svc.<name>), the Android
device starts and stops the service (android_init.py). Every change is told to init too, for
its `on property:` triggers.

Owned by the server; one thread accepts and answers; changes are serialised by a lock.
"""
import os
import pathlib
import socket
import struct
import threading
from typing import Dict, Optional, Protocol

# The emulator device's store, one definition of its format (stdlib only, like this adbd).
from droidheap.device.local import read_properties, write_properties

SETPROP2 = 0x00020001
# init's answers (property_service.h)
SUCCESS, ERROR_READ_DATA, ERROR_READ_ONLY, ERROR_INVALID_NAME, ERROR_PERMISSION_DENIED, \
    ERROR_INVALID_CMD, ERROR_CONTROL, ERROR_SET_FAILED = 0, 0x08, 0x0B, 0x10, 0x18, 0x1B, 0x20, 0x24
_SHELL_PREFIXES = ("debug.", "log.", "persist.debug.")
_MAX_FIELD = 4096
_SERVICE_STATES = {"ctl.start": "running", "ctl.stop": "stopped"}


class Store(Protocol):
    def read(self) -> Dict[str, str]: ...

    def write(self, updates: Dict[str, str]) -> None: ...


class Init(Protocol):
    def control(self, action: str, service: str) -> Optional[str]:
        """Carries out ctl.start / ctl.stop; an error message, or None."""

    def property_changed(self, key: str, value: str) -> None: ...


class TextStore:
    """The emulator device's store."""

    def __init__(self, root: pathlib.Path):
        self._root = root

    def read(self) -> Dict[str, str]:
        return read_properties(self._root)

    def write(self, updates: Dict[str, str]) -> None:
        write_properties(self._root, updates)


class RecordingInit:
    """The emulator device's init: no service runs; their states are what was asked."""

    def __init__(self, store: Store):
        self._store = store

    def control(self, action: str, service: str) -> Optional[str]:
        self._store.write({f"init.svc.{service}": _SERVICE_STATES[action]})
        return None

    def property_changed(self, key: str, value: str) -> None:
        pass


class PropertyService:
    def __init__(self, store: Store, socket_path: pathlib.Path, init: Optional[Init] = None):
        self._store = store
        self._socket_path = socket_path
        self._init = init or RecordingInit(store)
        # Serialises changes; init's triggers set properties from within one (hence reentrant).
        self.lock = threading.RLock()

    def read(self) -> Dict[str, str]:
        with self.lock:
            return self._store.read()

    def write(self, updates: Dict[str, str]) -> None:
        """Sets properties as init does at boot: no permission checks, triggers run."""
        with self.lock:
            for key, value in updates.items():
                self._store.write({key: value})
                self._init.property_changed(key, value)

    def write_one(self, key: str, value: str) -> None:
        self.write({key: value})

    def answer(self, key: str, value: str, uid: int) -> int:
        """One request of `uid`, as init's HandlePropertySet judges it."""
        if not key or "=" in key or "\n" in key or "\n" in value or "\0" in key + value:
            return ERROR_INVALID_NAME
        with self.lock:
            if key.startswith("ro.") and key in self._store.read():
                return ERROR_READ_ONLY
            if uid != 0 and not key.startswith(_SHELL_PREFIXES):
                return ERROR_PERMISSION_DENIED
            if key in _SERVICE_STATES:
                return SUCCESS if self._init.control(key, value) is None else ERROR_CONTROL
            try:
                self.write({key: value})
            except ValueError:  # a full area, a long value set twice
                return ERROR_SET_FAILED
            return SUCCESS

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
                    client.sendall(struct.pack("<i", self._request(client, uid)))
                except (OSError, ConnectionError):
                    continue

    def _request(self, client: socket.socket, uid: int) -> int:
        command = struct.unpack("<I", _read_exact(client, 4))[0]
        if command != SETPROP2:
            return ERROR_INVALID_CMD
        key, value = _read_field(client), _read_field(client)
        if key is None or value is None:
            return ERROR_READ_DATA
        return self.answer(key, value, uid)


def _read_exact(client: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = client.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the client closed the request early")
        data += chunk
    return data


def _read_field(client: socket.socket) -> Optional[str]:
    length = struct.unpack("<I", _read_exact(client, 4))[0]
    if length > _MAX_FIELD:
        return None
    try:
        return _read_exact(client, length).decode()
    except UnicodeDecodeError:
        return None
