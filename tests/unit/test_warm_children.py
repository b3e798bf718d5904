"""The children forked ahead, as the fork server picks them (`sandbox.spares.WarmChildren`):
one confined for a handler runs only that handler's jobs, and only a few handlers keep
children waiting."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from itertools import count

import pytest

from sandbox.spares import WarmChild, WarmChildren

_pids = count(100)


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    made: list[socket.socket] = []
    yield made
    for sock in made:
        sock.close()


def child(sockets: list[socket.socket], confined_for: str | None) -> WarmChild:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sockets += [ours, theirs]
    return WarmChild(pid=next(_pids), assignment=ours, confined_for=confined_for)


def told_to_exit(spare: WarmChild, sockets: list[socket.socket]) -> bool:
    """Its assignment socket was closed: the child reads end of stream, and exits."""
    theirs = sockets[sockets.index(spare.assignment) + 1]
    try:
        return theirs.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False


def test_a_child_confined_for_a_handler_comes_first_and_takes_no_other_handlers_job(
    sockets: list[socket.socket],
) -> None:
    warm = WarmChildren(4, kept_handlers=3)
    plain, for_a, for_b = (child(sockets, None), child(sockets, "a"), child(sockets, "b"))
    for spare in (plain, for_a, for_b):
        warm.add(spare)
    assert warm.take("b") is for_b
    assert warm.take("c") is plain  # one forked for no handler takes any
    assert not warm.ready_for("c")
    assert warm.take("c") is None  # the one confined for "a" stays for "a"
    assert warm.ready_for("a") and not warm.ready_for(None)
    assert warm.take("a") is for_a


def test_only_the_handlers_forked_for_last_keep_children_waiting(
    sockets: list[socket.socket],
) -> None:
    warm = WarmChildren(2, kept_handlers=2)
    plain = child(sockets, None)
    warm.add(plain)
    olds = [child(sockets, "old") for _ in range(2)]
    middles = [child(sockets, "middle") for _ in range(2)]
    for spare in olds + middles:
        warm.add(spare)
    warm.keep_latest("new")  # about to fork for "new": it and "middle" are kept
    assert all(told_to_exit(spare, sockets) for spare in olds)
    assert not any(told_to_exit(spare, sockets) for spare in [plain, *middles])
    assert warm.take("old") is plain
    assert warm.take("middle") is middles[0]
