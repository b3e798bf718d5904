"""`[pool] wait_replicas` on a real master with one replica, alone and as the node of a
Redis Cluster that serves the pool's slot: a dispatch and a claim return once the
replica holds them; with the replica cut off, a dispatch is a store failure and a claim
starts nothing (its jobs are released, unspent)."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
import redis

from supervisor.errors import StoreUnavailable
from supervisor.store.base import Store
from supervisor.store.records import DispatchRequest
from supervisor.store.redis.store import RedisStore
from tests.helpers.redis_cluster import RedisClusterNodes
from tests.helpers.redis_sentinel import cli
from tests.helpers.redis_server import RedisServer

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class Replicated:
    url: str
    master: RedisServer  # the node that takes the pool's writes
    replica: RedisServer

    def read_on_replica(self, key: str, field: str) -> str | None:
        """A field as the replica holds it (a cluster's replica answers reads only
        after READONLY, on the same connection)."""
        client = redis.Redis(port=self.replica.port, single_connection_client=True)
        try:
            if self.url.startswith("redis+cluster"):
                client.execute_command("READONLY")
            value = client.hget(key, field)
            return None if value is None else value.decode()
        finally:
            client.close()


def master_and_replica() -> Iterator[Replicated]:
    master = RedisServer(args=("--repl-diskless-sync-delay", "0")).start()
    replica = RedisServer(args=("--replicaof", "127.0.0.1", str(master.port))).start()
    try:
        while "master_link_status:up" not in cli(replica.port, "INFO", "replication"):
            pass
        yield Replicated(master.url, master, replica)
    finally:
        replica.remove()
        master.remove()


def cluster_with_replicas(pool_name: str) -> Iterator[Replicated]:
    cluster = RedisClusterNodes(replicas=1).start()
    try:
        master, replica = cluster.master_and_replica_of(f"poolsup:{{{pool_name}}}:token")
        yield Replicated(cluster.url, master, replica)
    finally:
        cluster.remove()


@pytest.fixture(params=["replica", "cluster"])
def replicated(request: pytest.FixtureRequest, pool_name: str) -> Iterator[Replicated]:
    if request.param == "replica":
        yield from master_and_replica()
    else:
        yield from cluster_with_replicas(pool_name)


@pytest.fixture
async def waiting_store(replicated: Replicated, pool_name: str) -> AsyncIterator[Store]:
    store = await RedisStore.open(replicated.url, pool_name, wait_replicas=1)
    yield store
    await store.close()


def request(key: str) -> DispatchRequest:
    return DispatchRequest(key=key, handler="h", payload=b"{}", max_attempts=3)


async def test_dispatch_and_claim_wait_for_the_replica(
    waiting_store: Store, replicated: Replicated, pool_name: str
) -> None:
    await waiting_store.dispatch(request("k1"))
    # Returned: the replica holds it already (read from the replica itself).
    job_key = f"poolsup:{{{pool_name}}}:job:k1"
    assert replicated.read_on_replica(job_key, "state") == "pending"
    batch = await waiting_store.claim("sup", ["h"], 1, 10, 3)
    assert [job.key for job in batch.jobs] == ["k1"]
    assert replicated.read_on_replica(job_key, "state") == "running"


async def test_without_the_replica_nothing_is_acknowledged_and_nothing_starts(
    waiting_store: Store, replicated: Replicated
) -> None:
    master, replica = replicated.master, replicated.replica
    await waiting_store.dispatch(request("k1"))
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        cli(master.port, "CLIENT", "KILL", "TYPE", "replica")
        with pytest.raises(StoreUnavailable, match="only 0 of wait_replicas = 1 replicas"):
            await waiting_store.dispatch(request("k2"))
        with pytest.raises(StoreUnavailable, match=r"released unstarted"):
            await waiting_store.claim("sup", ["h"], 2, 10, 3)
        for key in ("k1", "k2"):  # back to pending, no attempt spent
            record = await waiting_store.job(key)
            assert (record.state, record.attempts) == ("pending", 0)
    finally:
        os.kill(replica.pid, signal.SIGCONT)
