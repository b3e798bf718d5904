"""How a reused child's job ended, as the supervisor sees it (`forks.child.Child`): its
"done" on its channel, unless the fork server fenced it or ended it for a limit first."""

from __future__ import annotations

import signal
import socket
from collections.abc import Iterator

import pytest

from supervisor.forks.child import Child, ExitStatus


@pytest.fixture
def child() -> Iterator[Child]:
    control, their_control = socket.socketpair()
    output, their_output = socket.socketpair()
    child = Child(job_id="j", key="k", forked_at=0.0, control_socket=control,
                  output_socket=output, handler="h", pid=7)
    yield child
    child.close()
    their_control.close()
    their_output.close()


def test_done_ends_the_job_as_a_clean_exit(child: Child) -> None:
    child.reported_done()
    assert child.done and child.exited.is_set()
    assert child.status == ExitStatus(code=0, signal=None, fenced=False)


@pytest.mark.parametrize("status", [
    ExitStatus(code=None, signal=signal.SIGKILL, fenced=True),
    ExitStatus(code=None, signal=signal.SIGKILL, fenced=False, reason="memory limit"),
])
def test_a_fence_or_a_limit_that_came_first_has_the_last_word(
    child: Child, status: ExitStatus
) -> None:
    child.reported_done()
    child.ended(status)
    assert not child.done and child.status == status


@pytest.mark.parametrize("status", [
    ExitStatus(code=None, signal=signal.SIGKILL, fenced=False),
    ExitStatus(code=None, signal=signal.SIGKILL, fenced=False, fork_server_died="killed"),
])
def test_a_death_after_done_is_not_the_jobs(child: Child, status: ExitStatus) -> None:
    child.reported_done()
    child.ended(status)
    assert child.done and child.status == ExitStatus(code=0, signal=None, fenced=False)


def test_done_after_the_fork_servers_exit_changes_nothing(child: Child) -> None:
    killed = ExitStatus(code=None, signal=signal.SIGKILL, fenced=True)
    child.ended(killed)
    child.reported_done()
    assert not child.done and child.status == killed
