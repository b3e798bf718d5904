"""Many jobs at once on one supervisor: every spawn, fence and stop gets through."""

from __future__ import annotations

import os
import signal
import time

import psutil

from tests.helpers.pool import wait_for
from tests.integration.conftest import Pool

SLEEPER = {"naps": {"path": "outcomes.py", "function": "sleeps", "timeout": 0}}


def test_a_burst_of_spawns_all_start_and_finish(pool: Pool) -> None:
    jobs = 300
    supervisor = pool.start(pool.config(SLEEPER, capacity=jobs, lease_ttl=5))
    client = pool.client()
    keys = [f"burst-{i}" for i in range(jobs)]
    (fork_server,) = [p for p in psutil.Process(supervisor.pid).children()
                      if "sandbox.forkserver" in " ".join(p.cmdline())]
    # A paused fork server lets its socket fill up, so spawns queue behind each other.
    os.kill(fork_server.pid, signal.SIGSTOP)
    try:
        for key in keys:
            client.dispatch(key, {"seconds": 1}, handler="naps")
        wait_for(lambda: client.status()["counts"]["running"] == jobs, 30, interval=0.2)
        time.sleep(0.5)
    finally:
        os.kill(fork_server.pid, signal.SIGCONT)

    def all_succeeded() -> bool:
        return client.status()["counts"]["succeeded"] == jobs

    wait_for(all_succeeded, 90, interval=0.5, message="every job to succeed")
    assert all(client.job(key)["attempts"] == 1 for key in keys)
    assert "ERROR" not in supervisor.log()
