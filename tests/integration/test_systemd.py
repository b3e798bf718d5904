"""Running under systemd: the notify protocol on a real datagram socket, the watchdog,
what jobs inherit, and the log formats, against real `poolsup run` processes."""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.sd_notify import Notifier, take_service_environment


class NotifySocket:
    """A service manager's end: a bound AF_UNIX datagram socket, and what came in."""

    def __init__(self, address: str | bytes) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, dict[str, str]]] = []

    def receive(self) -> list[dict[str, str]]:
        """Every message that came in so far, oldest first."""
        while True:
            try:
                data = self.sock.recv(65536)
            except (TimeoutError, BlockingIOError):
                break
            fields = dict(line.split("=", 1) for line in data.decode().splitlines())
            self.messages.append((time.monotonic(), fields))
        return [fields for _, fields in self.messages]

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def notify_path(tmp_path: Path) -> Iterator[tuple[str, NotifySocket]]:
    path = str(tmp_path / "notify.sock")
    listener = NotifySocket(path)
    yield path, listener
    listener.close()


def test_notifier_sends_fields_to_a_socket_path(notify_path: tuple[str, NotifySocket]) -> None:
    path, listener = notify_path
    notifier = Notifier(path)
    notifier.send("READY=1", "STATUS=0/4 jobs running, store ok")
    notifier.close()
    assert listener.receive() == [{"READY": "1", "STATUS": "0/4 jobs running, store ok"}]


def test_notifier_sends_to_an_abstract_socket() -> None:
    name = f"poolsup-test-{uuid.uuid4().hex}"
    listener = NotifySocket("\0" + name)
    try:
        notifier = Notifier("@" + name)
        notifier.send("READY=1")
        notifier.close()
        assert listener.receive() == [{"READY": "1"}]
    finally:
        listener.close()


def test_notifier_without_a_socket_does_nothing() -> None:
    notifier = Notifier(None)
    assert not notifier.active
    notifier.send("READY=1")


def test_notifier_logs_once_and_never_raises_when_the_socket_is_gone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = Notifier(str(tmp_path / "nobody-listens.sock"))
    with caplog.at_level(logging.WARNING, logger="poolsup.systemd"):
        notifier.send("READY=1")
        notifier.send("STATUS=still here")
    notifier.close()
    assert len(caplog.records) == 1
    assert "could not notify the service manager" in caplog.records[0].getMessage()


def test_the_service_variables_are_taken_out_of_the_environment() -> None:
    environ = {"NOTIFY_SOCKET": "@sock", "WATCHDOG_USEC": "4000000", "PATH": "/bin"}
    service = take_service_environment(environ)
    assert service.notify_socket == "@sock"
    assert service.watchdog_interval == 2.0
    assert environ == {"PATH": "/bin"}
