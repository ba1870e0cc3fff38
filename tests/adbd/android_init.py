"""init's part of the Android test device: the services of the userland's own .rc files
(/system/etc/init/*.rc: heapprofd, traced, traced_probes), started and stopped by `ctl.start` /
`ctl.stop` and by their `on property:` triggers, with the sockets init creates and hands over
(`socket NAME stream MODE USER GROUP`: bound at /dev/socket/NAME, passed as the fd named by
$ANDROID_SOCKET_NAME, which libcutils' android_get_control_socket reads), and each service's state
in `init.svc.<name>` ("running", then "stopped" when it ends, whoever ended it).

Only what these .rc files use is read: `service NAME PATH ARGS...` with its `socket` lines, and
`on property:K=V [&& property:K=V]` with `start`, `stop` and `setprop` commands (others, such as
`mkdir`, are ignored: the device made its directories). Services run as root: a chroot's
--userspec cannot keep the capabilities (`capabilities KILL DAC_READ_SEARCH`) that let heapprofd
running as `nobody` read other processes' memory on a phone.

Owned by the server; called by the property service under its lock (one change at a time), and
by each service's waiter thread when it ends, which takes that lock first.
"""
import dataclasses
import os
import pathlib
import shlex
import signal
import socket
import subprocess
import threading
import time
from typing import Dict, List, Optional, Tuple

from .android_root import AndroidRoot
from .property_service import PropertyService


@dataclasses.dataclass
class Service:
    name: str
    argv: List[str]
    sockets: List[Tuple[str, str, int, str, str]] = dataclasses.field(default_factory=list)
    process: Optional[subprocess.Popen] = None


@dataclasses.dataclass
class Trigger:
    conditions: List[Tuple[str, str]]
    commands: List[List[str]]


_ANDROID_IDS = {"root": 0, "system": 1000, "shell": 2000, "nobody": 9999}


def _children(pid: int) -> List[int]:
    try:
        return [int(p) for p in pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _wait_gone(pids: List[int], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


def parse_rc(text: str) -> Tuple[List[Service], List[Trigger]]:
    services: List[Service] = []
    triggers: List[Trigger] = []
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = shlex.split(line, comments=True)
        if words[0] == "service" and len(words) >= 3:
            section = Service(words[1], words[2:])
            services.append(section)
        elif words[0] == "on":
            conditions = [tuple(word[len("property:"):].split("=", 1)) for word in words[1:]
                          if word.startswith("property:") and "=" in word]
            section = Trigger(conditions, []) if len(conditions) == len(
                [w for w in words[1:] if w != "&&"]) else None  # not a property trigger: skipped
            if section is not None:
                triggers.append(section)
        elif isinstance(section, Service) and words[0] == "socket" and len(words) >= 4:
            user = words[4] if len(words) > 4 else "root"
            group = words[5] if len(words) > 5 else "root"
            section.sockets.append((words[1], words[2], int(words[3], 8), user, group))
        elif isinstance(section, Trigger) and words[0] in ("start", "stop", "setprop"):
            section.commands.append(words)
    return services, triggers


class AndroidInit:
    def __init__(self, device: AndroidRoot):
        self._device = device
        self._properties: Optional[PropertyService] = None
        self._services: Dict[str, Service] = {}
        self._triggers: List[Trigger] = []
        for rc in sorted((device.path / "system/etc/init").glob("*.rc")):
            services, triggers = parse_rc(rc.read_text(errors="replace"))
            self._services.update((service.name, service) for service in services)
            self._triggers.extend(triggers)

    def boot(self, properties: PropertyService) -> None:
        """Runs the triggers the boot-time properties satisfy, as init does after loading them;
        from then on `properties` tells this init of every change."""
        self._properties = properties
        current = properties.read()
        for trigger in self._triggers:
            if all(current.get(key, "") == value for key, value in trigger.conditions):
                self._run(trigger)

    def property_changed(self, key: str, value: str) -> None:
        if self._properties is None:
            return  # not booted: boot() runs what the properties set so far trigger
        current = None
        for trigger in self._triggers:
            if any(k == key and v == value for k, v in trigger.conditions):
                current = current or self._properties.read()
                if all(current.get(k, "") == v for k, v in trigger.conditions):
                    self._run(trigger)

    def control(self, action: str, name: str) -> Optional[str]:
        service = self._services.get(name)
        if service is None:
            return f"no service {name}"
        if action == "ctl.start":
            self.start(service)
        else:
            self.stop(service)
        return None

    def _run(self, trigger: Trigger) -> None:
        for command in trigger.commands:
            if command[0] == "setprop" and len(command) == 3:
                self._properties.write_one(command[1], command[2])
            elif command[0] in ("start", "stop") and len(command) == 2:
                self.control(f"ctl.{command[0]}", command[1])

    def start(self, service: Service) -> None:
        with self._properties.lock:
            if service.process is not None and service.process.poll() is None:
                return
            sockets = [self._make_socket(*spec) for spec in service.sockets]
            env = {f"ANDROID_SOCKET_{name}": str(sock.fileno())
                   for (name, *_), sock in zip(service.sockets, sockets)}
            service.process = self._device.popen(
                service.argv, as_root=True, env=env, pass_fds=[s.fileno() for s in sockets],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for sock in sockets:
                sock.close()  # the service has them now
            self._properties.write_one(f"init.svc.{service.name}", "running")
            threading.Thread(target=self._wait, args=(service, service.process),
                             daemon=True).start()

    def stop(self, service: Service) -> None:
        with self._properties.lock:
            process = service.process
            if process is None or process.poll() is not None:
                self._properties.write_one(f"init.svc.{service.name}", "stopped")
                return
            # As init's `stop`: SIGKILL to the service's process group (which here also holds the
            # nsenter that started it).
            inside = _children(process.pid)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            _wait_gone(inside)  # reaped by the device's PID 1: then `pidof` no longer lists it
            self._properties.write_one(f"init.svc.{service.name}", "stopped")

    def _wait(self, service: Service, process: subprocess.Popen) -> None:
        process.wait()
        with self._properties.lock:
            if service.process is process:
                self._properties.write_one(f"init.svc.{service.name}", "stopped")

    def _make_socket(self, name: str, kind: str, mode: int, user: str,
                     group: str) -> socket.socket:
        path = self._device.host_path(f"/dev/socket/{name}")
        path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, {"stream": socket.SOCK_STREAM,
                                              "dgram": socket.SOCK_DGRAM}.get(
            kind, socket.SOCK_SEQPACKET))
        sock.bind(str(path))
        os.chown(path, _ANDROID_IDS.get(user, 0), _ANDROID_IDS.get(group, 0))
        os.chmod(path, mode)
        return sock
