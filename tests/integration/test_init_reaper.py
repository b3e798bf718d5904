"""The supervisor as PID 1 (supervisor/service/init_reaper.py): it reaps the zombies among
its children, and leaves alone live children and the fork servers, whose Popen reaps them.
(tests/container/test_image.py sees it do so as a container's PID 1.)"""

from __future__ import annotations

import os
import time

from supervisor.forks import orphans
from supervisor.service.init_reaper import reap_zombies
from tests.helpers.pool import wait_for


def _child(seconds: float) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        time.sleep(seconds)
        os._exit(0)
    return pid


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", "rb") as file:
        return file.read().rsplit(b")", 1)[1].split()[0] == b"Z"


def test_zombies_are_reaped_and_nothing_else() -> None:
    dead, fork_server, alive = _child(0), _child(0), _child(30)
    orphans.fork_server_pids.add(fork_server)
    try:
        wait_for(lambda: _zombie(dead) and _zombie(fork_server), 10, message="two zombies")
        assert dead in reap_zombies()
        assert not os.path.exists(f"/proc/{dead}")
        assert _zombie(fork_server)  # its Popen's to reap
        assert os.waitpid(alive, os.WNOHANG) == (0, 0)  # alive, not reaped
    finally:
        orphans.fork_server_pids.discard(fork_server)
        os.kill(alive, 9)
        os.waitpid(alive, 0)
        os.waitpid(fork_server, 0)
