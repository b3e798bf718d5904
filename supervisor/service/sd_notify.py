"""The sd_notify(3) protocol, by hand: datagrams to the service manager's socket.

Sending never blocks and never raises into the supervisor: a lost status message is
worth one log line, not a stuck or crashed supervisor.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import MutableMapping
from dataclasses import dataclass

from supervisor.core.watchdog import watchdog_interval

log = logging.getLogger("poolsup.systemd")

# Meant for this process alone: never passed on to the fork server or a job.
SERVICE_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class Notifier:
    """Sends to `$NOTIFY_SOCKET` (a path, or an abstract name written with a leading
    `@`); does nothing when there is none."""

    def __init__(self, address: str | None) -> None:
        self._address: str | None = None
        self._socket: socket.socket | None = None
        self._warned = False
        if address:
            self._address = "\0" + address[1:] if address.startswith("@") else address
            self._socket = socket.socket(
                socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
            )

    @property
    def active(self) -> bool:
        return self._socket is not None

    def send(self, *fields: str) -> None:
        """One message of `NAME=value` fields, e.g. send("READY=1", "STATUS=...")."""
        if self._socket is None or self._address is None:
            return
        try:
            self._socket.sendto("\n".join(fields).encode(), self._address)
        except OSError as error:  # BlockingIOError included: the manager is not reading
            if not self._warned:
                self._warned = True
                log.warning("could not notify the service manager (further failures are not "
                            "logged): %s", error)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


@dataclass(frozen=True, kw_only=True)
class ServiceEnvironment:
    notify_socket: str | None
    watchdog_interval: float | None  # seconds between WATCHDOG=1 pings


NO_SERVICE_MANAGER = ServiceEnvironment(notify_socket=None, watchdog_interval=None)


def take_service_environment(environ: MutableMapping[str, str]) -> ServiceEnvironment:
    """Read the service manager's variables and remove them from `environ`, as
    sd_notify(3)'s `unset_environment` does: nothing started later inherits them."""
    taken = {name: environ.pop(name, None) for name in SERVICE_VARIABLES}
    return ServiceEnvironment(
        notify_socket=taken["NOTIFY_SOCKET"] or None,
        watchdog_interval=watchdog_interval(
            taken["WATCHDOG_USEC"], taken["WATCHDOG_PID"], pid=os.getpid()
        ),
    )
