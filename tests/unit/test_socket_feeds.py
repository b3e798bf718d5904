"""A child's sockets are read through one epoll of the supervisor's own (job/channel.py
SocketFeed): what arrives reaches its reader, the end of stream closes the feed, and a
socket number used again after a feed ended (the kernel reuses the lowest free number)
is read for its new socket, also when the old socket was closed while still watched."""

from __future__ import annotations

import socket

import anyio
import pytest

from supervisor.job.channel import SocketFeed

pytestmark = pytest.mark.anyio


def pair() -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    return ours, theirs


class Reader:
    """What a feed hands over, and an event once `size` bytes came."""

    def __init__(self, size: int) -> None:
        self.got = b""
        self.size = size
        self.done = anyio.Event()

    def feed(self, data: bytes) -> None:
        self.got += data
        if len(self.got) >= self.size:
            self.done.set()

    async def wait(self) -> bytes:
        with anyio.fail_after(5):
            await self.done.wait()
        return self.got


async def test_what_arrives_reaches_the_reader_and_the_end_closes_the_feed() -> None:
    ours, theirs = pair()
    reader = Reader(11)
    feed = SocketFeed(ours, reader.feed)
    theirs.sendall(b"hello ")
    theirs.sendall(b"world")
    assert await reader.wait() == b"hello world"
    theirs.close()
    with anyio.fail_after(5):
        await feed.closed.wait()
    ours.close()


@pytest.mark.parametrize("closed_first", [False, True])
async def test_a_socket_number_used_again_is_read_for_its_new_socket(
    closed_first: bool,
) -> None:
    old, old_peer = pair()
    number = old.fileno()
    stale: list[bytes] = []
    first = SocketFeed(old, stale.append)
    if closed_first:  # closed while watched: the kernel drops it from the epoll
        old.close()
        first.close()
    else:
        first.close()
        old.close()
    old_peer.close()
    new, new_peer = pair()
    assert new.fileno() == number  # the lowest free number, as the kernel gives
    reader = Reader(5)
    feed = SocketFeed(new, reader.feed)
    new_peer.sendall(b"again")
    assert await reader.wait() == b"again"
    assert stale == []
    feed.close()
    new.close()
    new_peer.close()
