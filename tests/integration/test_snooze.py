"""`sandbox.Snooze`, from outside: a real supervisor on each store runs the handler in a
real child; the job runs again later without spending its attempt."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from supervisor import Client
from tests.helpers.pool import finished, wait_for
from tests.integration.conftest import Pool

HANDLERS: dict[str, dict[str, Any]] = {
    "snoozes": {"path": "snoozing.py", "function": "snoozes_once", "max_attempts": 1},
    "snoozes_async": {"path": "snoozing.py", "function": "snoozes_once_async",
                      "max_attempts": 1},
    "snoozes_reused": {"path": "snoozing.py", "function": "snoozes_once", "max_attempts": 1,
                       "max_jobs_per_child": 10},
    "snoozes_badly": {"path": "snoozing.py", "function": "snoozes_badly", "max_attempts": 1},
}
SNOOZE = 2.0


@pytest.fixture
def running_pool(pool: Pool) -> Pool:
    pool.start(pool.config(HANDLERS, capacity=1, lease_ttl=2, stop_grace=2))
    return pool


def snoozed(client: Client, key: str) -> dict[str, Any] | None:
    record: dict[str, Any] = client.job(key)
    return record if record["state"] == "pending" and record["snoozes"] == 1 else None


@pytest.mark.parametrize("handler", ["snoozes", "snoozes_async", "snoozes_reused"])
def test_a_snoozed_job_runs_again_after_its_delay_with_the_same_attempt(
    running_pool: Pool, handler: str
) -> None:
    client = running_pool.client()
    client.dispatch("later", {"seconds": SNOOZE}, handler=handler)

    record = wait_for(lambda: finished(client, "later"), 30, message="the snoozed job")

    assert record["state"] == "succeeded", record
    result = record["result"]
    assert (record["attempts"], result["attempt"], record["snoozes"]) == (1, 1, 1)
    # by the store's clock, on this host: generous below, and not held back for long
    assert SNOOZE - 0.3 <= result["started"] - result["snoozed_at"] <= SNOOZE + 10
    events = [(event["event"], event["detail"]) for event in record["events"]]
    assert ("snoozed", "for 2 s") in events
    assert [name for name, _ in events].count("started") == 2
    if handler == "snoozes_reused":  # the child that snoozed ran the next run (capacity 1)
        assert result["pid"] == result["snoozed_pid"]


def test_a_stop_during_the_snooze_ends_the_job_stopped(running_pool: Pool) -> None:
    client = running_pool.client()
    client.dispatch("held", {"seconds": 600}, handler="snoozes")
    wait_for(lambda: snoozed(client, "held"), 20, message="the job to snooze")

    stopped = client.stop("held", timeout=20)

    assert (stopped["state"], stopped["snoozes"], stopped["attempts"]) == ("stopped", 1, 0)


def test_a_drain_during_the_snooze_leaves_the_job_pending(running_pool: Pool) -> None:
    client = running_pool.client()
    client.dispatch("held", {"seconds": 600}, handler="snoozes")
    wait_for(lambda: snoozed(client, "held"), 20, message="the job to snooze")
    supervisor = running_pool.supervisors[0]

    supervisor.signal(signal.SIGTERM)

    assert supervisor.wait(30) == 0
    record = client.job("held")
    assert (record["state"], record["snoozes"], record["attempts"]) == ("pending", 1, 0)
    assert record["checkpoint"]["snoozed_at"] > 0


@pytest.mark.parametrize("seconds", [-1, "soon", 10**9])
def test_a_snooze_of_bad_seconds_fails_the_attempt_with_one_clear_line(
    running_pool: Pool, seconds: Any
) -> None:
    client = running_pool.client()
    client.dispatch("bad", {"seconds": seconds}, handler="snoozes_badly")

    record = wait_for(lambda: finished(client, "bad"), 30, message="the bad snooze")

    assert record["state"] == "failed", record
    first_line = record["error"].splitlines()[0]
    assert first_line.startswith("ValueError: sandbox.Snooze takes "), first_line
    assert repr(seconds) in first_line
    assert record["snoozes"] == 0
