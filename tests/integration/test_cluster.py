"""A pool on a real three-node Redis Cluster, run by real supervisors: dispatch, claim,
renew, complete, notify, stop, and the failover of a SIGKILLed supervisor."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from supervisor import Client
from tests.helpers.pool import assert_one_process_at_a_time, finished, read_ledger, wait_for
from tests.helpers.redis_cluster import RedisClusterNodes
from tests.integration.conftest import Pool

LEASE_TTL = 2
HANDLERS = {
    "echo": {"path": "outcomes.py", "function": "async_echo"},
    "listens": {"path": "outcomes.py", "function": "listens"},
    "waits": {"path": "outcomes.py", "function": "waits_for_stop"},
    "ledger": {"path": "ledger.py", "timeout": 0},
}


@pytest.fixture
def cluster_pool(
    tmp_path: Path, redis_cluster: RedisClusterNodes, pool_name: str
) -> Iterator[Pool]:
    pool = Pool(tmp_path, redis_cluster.url, pool_name)
    yield pool
    pool.close()


def state_of(client: Client, key: str, state: str) -> dict[str, Any] | None:
    record: dict[str, Any] = client.job(key)
    return record if record["state"] == state else None


def test_a_pool_on_a_redis_cluster_runs_stops_notifies_and_fails_over(
    cluster_pool: Pool, tmp_path: Path
) -> None:
    pool = cluster_pool
    first = pool.start(pool.config(HANDLERS, file="a.toml", id="a", capacity=4,
                                   lease_ttl=LEASE_TTL))
    client = pool.client()

    started = time.monotonic()
    client.dispatch("echo-1", {"n": 1}, handler="echo")
    record = wait_for(lambda: finished(client, "echo-1"), 20, interval=0.01, message="echo-1")
    echo_seconds = time.monotonic() - started
    assert (record["state"], record["result"]) == ("succeeded", {"echo": {"n": 1}})

    client.dispatch("listen-1", None, handler="listens")
    wait_for(lambda: state_of(client, "listen-1", "running"), 20, message="listen-1 to run")
    client.notify("listen-1", {"hello": "cluster"})
    record = wait_for(lambda: finished(client, "listen-1"), 20, message="listen-1 to end")
    assert record["result"] == {"note": {"hello": "cluster"}}

    client.dispatch("stop-1", {}, handler="waits")
    wait_for(lambda: state_of(client, "stop-1", "running"), 20, message="stop-1 to run")
    started = time.monotonic()
    client.stop("stop-1")
    stop_seconds = time.monotonic() - started
    assert client.job("stop-1")["state"] == "stopped"

    # Failover: a job that outlives several leases (so renewals work) moves to b when
    # a is SIGKILLed.
    ledger = tmp_path / "ledger.txt"
    client.dispatch("fo-1", {"ledger": str(ledger), "seconds": 4}, handler="ledger")
    before = wait_for(lambda: state_of(client, "fo-1", "running"), 20, message="fo-1 to run")
    assert before["supervisor"] == "a"
    pool.start(pool.config(HANDLERS, file="b.toml", id="b", capacity=4, lease_ttl=LEASE_TTL))
    first.process.kill()
    killed_at = time.monotonic()

    def restarted() -> float | None:
        new = [line.at for line in read_ledger(ledger) if line.token > before["token"]]
        return min(new) if new else None

    restarted_at = wait_for(restarted, LEASE_TTL + 20, interval=0.02, message="failover")
    failover_seconds = restarted_at - killed_at  # the ledger's stamps are monotonic too
    record = wait_for(lambda: finished(client, "fo-1"), 30, message="fo-1 to end")
    assert (record["state"], record["supervisor"]) == ("succeeded", "b")
    assert failover_seconds < LEASE_TTL + 2
    assert_one_process_at_a_time(read_ledger(ledger))
    print(f"\ncluster: dispatch to succeeded {echo_seconds * 1000:.0f} ms, stop "
          f"{stop_seconds * 1000:.0f} ms, failover after SIGKILL {failover_seconds:.2f} s "
          f"(lease_ttl {LEASE_TTL} s)")
