"""Which waiting children the fork server retires for having waited too long
(`sandbox.spares.IdleChildren.retire_idle`), with `now` passed in."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from sandbox.spares import IDLE_LIMIT, IdleChildren, WarmChild


@pytest.fixture
def far_ends() -> Iterator[list[socket.socket]]:
    """The children's ends of their assignment sockets: end of stream once retired."""
    ends: list[socket.socket] = []
    yield ends
    for end in ends:
        end.close()


def child(pid: int, far_ends: list[socket.socket]) -> WarmChild:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    far_ends.append(theirs)
    return WarmChild(pid=pid, assignment=ours)


def told_to_exit(end: socket.socket) -> bool:
    end.settimeout(0)
    try:
        return end.recv(16) == b""
    except BlockingIOError:
        return False


def test_the_limit_is_a_minute() -> None:
    assert IDLE_LIMIT == 60.0


def test_only_children_idle_past_the_limit_are_retired(far_ends: list[socket.socket]) -> None:
    idle = IdleChildren(limit=60.0)
    idle.put("a", child(1, far_ends), now=100.0)
    idle.put("a", child(2, far_ends), now=130.0)
    idle.put("b", child(3, far_ends), now=100.0)
    idle.retire_idle(now=160.0)  # exactly the limit: kept
    assert not any(told_to_exit(end) for end in far_ends)
    idle.retire_idle(now=160.5)
    assert [told_to_exit(end) for end in far_ends] == [True, False, True]
    taken = idle.take("a")
    assert taken is not None and taken.pid == 2
    assert idle.take("a") is None and idle.take("b") is None
    taken.assignment.close()


def test_a_retired_child_counts_as_a_spare_until_it_is_reaped(
    far_ends: list[socket.socket],
) -> None:
    """Or the fork server would kill it as a job's leftover instead of letting it exit."""
    idle = IdleChildren(limit=1.0)
    idle.put("a", child(7, far_ends), now=0.0)
    idle.retire_idle(now=5.0)
    assert idle.pids() == {7}
    idle.forget({7})
    assert idle.pids() == set()


def test_a_child_taken_and_put_back_waits_from_its_last_job(
    far_ends: list[socket.socket],
) -> None:
    idle = IdleChildren(limit=60.0)
    reused = child(1, far_ends)
    idle.put("a", reused, now=0.0)
    assert idle.take("a") is reused
    idle.put("a", reused, now=50.0)
    idle.retire_idle(now=100.0)
    assert not told_to_exit(far_ends[0])
    idle.close_all()
