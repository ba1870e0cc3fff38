"""Reaching a device through the adb server: starting the server when none runs, choosing the
device (-s/--serial, else $ANDROID_SERIAL, else the only one), and turning adb's failures into
one-line DroidheapErrors.

Plain functions, used by AdbDevice while it is being opened and on every request after.
"""
import contextlib
import os
import socket
import subprocess
from typing import Iterator, List, Optional

import adbutils

from droidheap.errors import DroidheapError

_START_TIMEOUT_S = 30.0
_DEFAULT_PORT = 5037
_LOCAL = "; or use --local for this machine's emulator device"


def server_address() -> tuple:
    host = os.environ.get("ANDROID_ADB_SERVER_HOST", "127.0.0.1")
    try:
        port = int(os.environ.get("ANDROID_ADB_SERVER_PORT", _DEFAULT_PORT))
    except ValueError:
        raise DroidheapError("ANDROID_ADB_SERVER_PORT is not a port number") from None
    return host, port


def adb_executable() -> str:
    """The `adb` on PATH, else the one adbutils ships."""
    try:
        return adbutils.adb_path()
    except adbutils.AdbError:
        raise DroidheapError(f"no adb found: install Android's platform tools{_LOCAL}") from None


def _server_running(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3):
            return True
    except OSError:
        return False


def ensure_server() -> adbutils.AdbClient:
    """A client of a running adb server; starts one (as `adb` would) when none answers."""
    host, port = server_address()
    if not _server_running(host, port):
        adb = adb_executable()
        try:
            result = subprocess.run([adb, "start-server"], capture_output=True, text=True,
                                    timeout=_START_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise DroidheapError(f"cannot start the adb server ({adb} start-server: {e}){_LOCAL}") \
                from None
        if result.returncode != 0 or not _server_running(host, port):
            lines = (result.stderr or result.stdout).strip().splitlines()
            raise DroidheapError(f"cannot start the adb server on port {port} "
                                 f"({lines[-1] if lines else f'{adb} start-server failed'}){_LOCAL}")
    return adbutils.AdbClient(host=host, port=port)


@contextlib.contextmanager
def adb_errors(what: str) -> Iterator[None]:
    """adbutils' and the socket's errors, as one line saying what failed."""
    try:
        yield
    except adbutils.AdbTimeout:
        raise DroidheapError(f"{what}: the device did not answer in time (adb timed out)") \
            from None
    except (adbutils.AdbError, OSError, EOFError) as e:
        detail = str(e).strip().splitlines()
        raise DroidheapError(f"{what}: {detail[0] if detail else type(e).__name__}") from None


_STATE_ADVICE = {
    "unauthorized": "accept the USB debugging prompt on the phone, then run droidheap again",
    "offline": "reconnect it (unplug and plug it back in, or `adb reconnect`)",
    "authorizing": "wait for it to finish authorizing, then run droidheap again",
    "no permissions": "fix its USB permissions (udev rules for your user)",
}


def _check_state(serial: str, state: str) -> None:
    if state != "device":
        advice = _STATE_ADVICE.get(state, "check it with `adb devices`")
        raise DroidheapError(f"adb device {serial} is {state}: {advice}")


def select_serial(client: adbutils.AdbClient, serial: Optional[str]) -> str:
    """The serial of the one device to use; a DroidheapError saying what to do otherwise."""
    with adb_errors("cannot list adb devices"):
        devices = client.list()
    wanted = serial or os.environ.get("ANDROID_SERIAL") or None
    if wanted is not None:
        for info in devices:
            if info.serial == wanted:
                _check_state(info.serial, info.state)
                return info.serial
        origin = "-s" if serial else "$ANDROID_SERIAL"
        known = ", ".join(info.serial for info in devices) or "none"
        raise DroidheapError(f"no adb device {wanted} (from {origin}); adb devices lists: {known}")
    if not devices:
        raise DroidheapError("no adb device connected: plug in a phone with USB debugging on "
                             "(or `adb connect HOST:PORT`), or use --local for this machine")
    if len(devices) > 1:
        serials: List[str] = [info.serial for info in devices]
        raise DroidheapError(f"{len(devices)} adb devices connected ({', '.join(serials)}): "
                             f"choose one with -s SERIAL or $ANDROID_SERIAL")
    _check_state(devices[0].serial, devices[0].state)
    return devices[0].serial
