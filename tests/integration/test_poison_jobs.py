"""A job that kills the only supervisor of its pool each time it runs is failed after
MAX_LEASE_LOSSES lease losses, on Redis and SQLite: it cannot loop forever, however long its
host takes to come back (Redis used to excuse a lease that ran out while no supervisor
wrote for 1.5 s)."""

from __future__ import annotations

import time

from supervisor.core.leases import MAX_LEASE_LOSSES
from tests.helpers.pool import SupervisorProcess, finished, wait_for
from tests.integration.conftest import Pool

# "off": sandboxed, a job cannot signal its supervisor (tests/integration/test_sandbox.py).
HANDLERS = {"poison": {"path": "hostile_kills_supervisor.py", "function": "run",
                       "max_attempts": 1, "sandbox": "off"}}
HOST_DOWN = 2.0  # the host reboots: nobody writes to the store meanwhile
MAX_ROUNDS = MAX_LEASE_LOSSES + 3


def died(supervisor: SupervisorProcess) -> bool:
    return supervisor.process.poll() is not None


def test_a_job_that_kills_its_only_supervisor_is_failed_after_max_lease_losses(
    pool: Pool,
) -> None:
    config = pool.config(HANDLERS, id="only", capacity=1, lease_ttl=1)
    client = pool.client()
    client.dispatch("poison", {}, handler="poison")
    deaths = 0
    while True:
        supervisor = pool.start(config, serving=False)
        wait_for(lambda: died(supervisor) or finished(client, "poison"), 60,  # noqa: B023
                 message="the job to kill its supervisor or to end")
        if not died(supervisor):
            break  # it recovered the last lease, and the job ended
        deaths += 1
        assert deaths <= MAX_ROUNDS, f"{client.job('poison')} after {deaths} deaths"
        time.sleep(HOST_DOWN)

    record = client.job("poison")
    assert record["state"] == "failed", record
    assert record["lease_losses"] == MAX_LEASE_LOSSES, record
    assert f"lease lost {MAX_LEASE_LOSSES} times" in record["error"], record
    assert deaths == MAX_LEASE_LOSSES, pool.logs()
