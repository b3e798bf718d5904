"""Guarantee 5 when a fork server dies: the daemons its jobs started (re-parented away
from it) are killed before the jobs run again, and the supervisor keeps serving."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.helpers.pool import finished, fork_server_of, wait_for
from tests.integration.conftest import Pool

HANDLERS = {
    "daemon": {"path": "leftovers.py", "function": "daemon_then_sleep", "timeout": 0,
               "max_attempts": 5},
    "normal": {"path": "basic.py", "function": "echo"},
}


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False



def daemons(pid_file: Path) -> dict[int, int]:
    """attempt -> the pid of the daemon it started."""
    if not pid_file.exists():
        return {}
    return {int(attempt): int(pid) for attempt, pid in
            (line.split() for line in pid_file.read_text().splitlines())}


@pytest.fixture
def pid_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "daemons"
    yield path
    for pid in daemons(path).values():  # what a failing run left behind
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_guarantee_5_daemons_die_with_their_fork_server_before_the_retry(
    pool: Pool, pid_file: Path
) -> None:
    supervisor = pool.start(pool.config(HANDLERS, capacity=2, lease_ttl=2))
    client = pool.client()
    client.dispatch("fs-1", {"pid_file": str(pid_file)}, handler="daemon")
    daemon = wait_for(lambda: daemons(pid_file).get(1), 20, message="the first daemon")
    fork_server = fork_server_of(supervisor)

    fork_server.kill()
    killed_at = time.monotonic()
    wait_for(lambda: not alive(daemon), 10, interval=0.01, message=f"daemon {daemon} to die")
    assert time.monotonic() - killed_at < 2.5

    wait_for(lambda: daemons(pid_file).get(2), 30, message="the second attempt")
    starts = (pid_file.parent / (pid_file.name + ".starts")).read_text().splitlines()
    assert starts[1].split() == ["2"], f"alive when attempt 2 started: {starts[1]}"
    assert fork_server_of(supervisor).pid != fork_server.pid

    client.stop("fs-1", timeout=20)
    client.dispatch("after", {"x": 1}, handler="normal")
    record = wait_for(lambda: finished(client, "after"), 20, message="the next job")
    assert record["state"] == "succeeded", record
    assert supervisor.process.poll() is None
    assert all(not alive(pid) for pid in daemons(pid_file).values())


# Sandboxed ("default"), a job cannot signal its fork server (tests/integration/
# test_sandbox.py); "off", it can, and must then spend its own attempts only.
KILLERS = {
    "kills": {"path": "hostile_kills_fork_server.py", "max_attempts": 1, "sandbox": "off"},
    "kills3": {"path": "hostile_kills_fork_server.py", "max_attempts": 3, "sandbox": "off"},
    "sleeps": {"path": "edges.py", "function": "sleeps", "max_attempts": 1},
    "normal": {"path": "basic.py", "function": "echo"},
}
DIED_UNDER_IT = "the fork server died under it"


def test_a_job_that_kills_its_fork_server_spends_its_attempt_and_fails(pool: Pool) -> None:
    supervisor = pool.start(pool.config(KILLERS, capacity=2, lease_ttl=2))
    client = pool.client()
    client.dispatch("killer", {}, handler="kills")
    record = wait_for(lambda: finished(client, "killer"), 30, message="the killer to end")
    assert record["state"] == "failed", record
    assert DIED_UNDER_IT in record["error"], record
    assert record["attempts"] == 1, record

    client.dispatch("after", {"x": 1}, handler="normal")
    record = wait_for(lambda: finished(client, "after"), 20, message="the next job")
    assert record["state"] == "succeeded", record
    assert supervisor.process.poll() is None, supervisor.log()


@pytest.mark.timeout(240)
def test_jobs_that_keep_killing_their_fork_server_never_stop_the_supervisor(
    pool: Pool,
) -> None:
    """More killers than the old lifetime budget of restarts (5), each with 3 attempts;
    an innocent job with one attempt runs beside them and is never failed for it."""
    supervisor = pool.start(pool.config(KILLERS, capacity=3, lease_ttl=2))
    client = pool.client()
    client.dispatch("innocent", {"seconds": 4}, handler="sleeps")
    wait_for(lambda: client.job("innocent")["state"] == "running", 20,
             message="the innocent job to run")
    killers = [f"killer-{n}" for n in range(6)]
    for key in killers:
        client.dispatch(key, {}, handler="kills3")
        time.sleep(0.5)
    for key in killers:
        record = wait_for(lambda key=key: finished(client, key), 150,  # type: ignore[misc]
                          message=f"{key} to end")
        assert record["state"] == "failed", record
        assert DIED_UNDER_IT in record["error"], record
        assert record["attempts"] == 3, record
    assert supervisor.process.poll() is None, supervisor.log()

    innocent = wait_for(lambda: finished(client, "innocent"), 60,
                        message="the innocent job to end")
    assert innocent["state"] == "succeeded", innocent
    client.dispatch("after", {"x": 1}, handler="normal")
    record = wait_for(lambda: finished(client, "after"), 30, message="the next job")
    assert record["state"] == "succeeded", record
    assert supervisor.process.poll() is None, supervisor.log()
