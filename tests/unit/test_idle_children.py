"""Which idle reused children the supervisor retires for having waited too long
(`supervisor.forks.idle_children.IdleChildren`), with `now` passed in; and the fork
server's side of them (`sandbox.spares.IdleChildren`)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from sandbox import spares
from supervisor.forks.idle_children import IDLE_LIMIT, IdleChild, IdleChildren


@pytest.fixture
def far_ends() -> Iterator[list[socket.socket]]:
    """The children's ends of their control sockets: end of stream once retired."""
    ends: list[socket.socket] = []
    yield ends
    for end in ends:
        end.close()


def child(pid: int, far_ends: list[socket.socket]) -> IdleChild:
    control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    output, their_output = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    far_ends.extend([theirs, their_output])
    return IdleChild(pid=pid, control=control, output=output)


def told_to_exit(end: socket.socket) -> bool:
    end.settimeout(0)
    try:
        return end.recv(16) == b""
    except BlockingIOError:
        return False


def retire(idle: IdleChildren, now: float) -> None:
    for old in idle.expired(now):
        old.close()


def test_the_limit_is_a_minute() -> None:
    assert IDLE_LIMIT == 60.0


def test_only_children_idle_past_the_limit_are_retired(far_ends: list[socket.socket]) -> None:
    idle = IdleChildren(limit=60.0)
    idle.put("a", child(1, far_ends), now=100.0)
    idle.put("a", child(2, far_ends), now=130.0)
    idle.put("b", child(3, far_ends), now=100.0)
    assert idle.next_expiry() == 160.0
    retire(idle, now=160.0)  # exactly the limit: kept
    assert not any(told_to_exit(end) for end in far_ends)
    retire(idle, now=160.5)
    assert [told_to_exit(end) for end in far_ends[::2]] == [True, False, True]
    assert idle.next_expiry() == 190.0
    taken = idle.take("a")
    assert taken is not None and taken.pid == 2
    assert idle.take("a") is None and idle.take("b") is None
    assert not idle and idle.next_expiry() is None
    taken.close()


def test_the_child_used_last_runs_the_next_job(far_ends: list[socket.socket]) -> None:
    idle = IdleChildren(limit=60.0)
    idle.put("a", child(1, far_ends), now=0.0)
    idle.put("a", child(2, far_ends), now=1.0)
    taken = idle.take("a")
    assert taken is not None and taken.pid == 2
    for left in [taken, *idle.take_all()]:
        left.close()


def test_a_child_taken_and_put_back_waits_from_its_last_job(
    far_ends: list[socket.socket],
) -> None:
    idle = IdleChildren(limit=60.0)
    reused = child(1, far_ends)
    idle.put("a", reused, now=0.0)
    assert idle.take("a") is reused
    idle.put("a", reused, now=50.0)
    retire(idle, now=100.0)
    assert not told_to_exit(far_ends[0])
    for left in idle.take_all():
        left.close()


def test_a_retired_child_counts_as_a_spare_at_the_fork_server_until_it_is_reaped() -> None:
    """Or the fork server would kill it as a job's leftover instead of letting it exit."""
    idle = spares.IdleChildren()
    idle.put(spares.IdleChild(pid=7, handler="a", scratch="job-1", cpu_base=0.0))
    assert idle.pids() == {7}
    assert [child.scratch for child in idle.forget({7, 8})] == ["job-1"]
    assert idle.pids() == set()
    assert idle.take(7) is None
