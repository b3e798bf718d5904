"""1,000 jobs running at once on one busy host (issue 41): each job's store traffic at its
start, output, checkpoint and end comes at the same moment for all of them, and none may
cost a lease. Shared async children hold them here (a process each would take 3.4 GB)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.helpers.pool import wait_for
from tests.integration.conftest import Pool

JOBS = 1000
BURNERS = 2  # CPU-bound processes meanwhile, on 2 cores


@pytest.fixture
def busy_cores() -> Iterator[None]:
    """Processes spinning meanwhile: a loaded host."""
    spin = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end: pass\n"
    burners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(BURNERS)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


@pytest.mark.usefixtures("busy_cores")
def test_a_thousand_running_jobs_on_a_busy_host_keep_their_leases(pool: Pool) -> None:
    handlers = {"many": {"path": "shared_async.py", "function": "many", "timeout": 0,
                         "child_concurrency": 250}}
    # The default lease_ttl (10 s): with 5 s, a fresh-clone .ci/run on a loaded machine
    # lost leases at the jobs' ends (renewals waited for connections and timed out).
    supervisor = pool.start(pool.config(handlers, capacity=JOBS, lease_ttl=10))
    client = pool.client()
    client.dispatch_many([{"key": f"many-{n}", "payload": {"seconds": 8}, "handler": "many"}
                          for n in range(JOBS)])

    def counts() -> dict[str, int]:
        return client.status()["counts"]  # type: ignore[no-any-return]

    wait_for(lambda: counts()["running"] == JOBS, 60, interval=0.5,
             message=f"{JOBS} jobs running at once")
    wait_for(lambda: counts()["succeeded"] == JOBS, 90, interval=0.5,
             message=f"{JOBS} jobs to succeed")
    records = client.jobs("succeeded")
    assert len(records) == JOBS
    assert all(record["attempts"] == 1 for record in records)
    log = supervisor.log()
    assert "Too many connections" not in log
    assert "lease lost" not in log and "fence" not in log.lower(), log[-3000:]
