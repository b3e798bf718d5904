"""A job's end of its control socket: a reused child's job's last message goes with
what follows it, in one write, so that the supervisor wakes once for both."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from sandbox import protocol
from sandbox.channel import ControlChannel


@pytest.fixture
def pair() -> Iterator[tuple[ControlChannel, socket.socket]]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    theirs.setblocking(False)
    channel = ControlChannel(ours.detach())
    yield channel, theirs
    channel.sock.close()
    theirs.close()


def received(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except BlockingIOError:
        return b""


def test_a_held_last_message_goes_with_the_done_in_one_write(
    pair: tuple[ControlChannel, socket.socket],
) -> None:
    channel, supervisor = pair
    channel.holds_last = True
    channel.send_last(b'{"t":"result","value":1}\n')
    assert received(supervisor) == b""
    channel.send_held(protocol.Done())
    assert received(supervisor) == b'{"t":"result","value":1}\n' + protocol.encode_line(
        protocol.Done())
    channel.send_held()  # nothing held: nothing written
    assert received(supervisor) == b""


def test_a_last_message_not_held_goes_at_once(
    pair: tuple[ControlChannel, socket.socket],
) -> None:
    channel, supervisor = pair
    channel.send_last(b'{"t":"result","value":1}\n')
    assert received(supervisor) == b'{"t":"result","value":1}\n'
