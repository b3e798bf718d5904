"""One rule on every store (core/lease_losses.py): a lease that ran out counts as a loss
of its job unless a live supervisor saw the store failing over the lease's end, so a
job that keeps killing its only supervisor is failed after `max_lease_losses`, and one
whose leases run out while the store stands still is not."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import anyio
import anyio.abc
import anyio.to_thread
import psycopg
import pytest
import redis

from supervisor.store.policy import JUDGE_AFTER_GAP, MIN_CLAIM_GAP
from supervisor.store.records import LeaseRecovery
from supervisor.store.sqlite.schema import path_from_url
from tests.helpers.redis_cluster import RedisClusterNodes
from tests.store.conftest import Connect, StoreTarget
from tests.store.support import (
    OWNER,
    SHORT_TTL,
    claim,
    claim_as_supervisors_do,
    claim_one,
    new_job,
)

pytestmark = pytest.mark.anyio

# Longer than the store's silence that Redis used to excuse (a "quiet window" of 1.5 s).
HOST_DOWN = 2.0
# Longer than half the lease of a claim held up that long (2 x HELD_UP - 1 s).
HELD_UP = 1.5
# A lease whose end comes after a gap of MIN_CLAIM_GAP and some claims.
RENEWED_TTL = 2.0
# Shorter than that silence, longer than SHORT_TTL: the lease ends while it lasts.
STANDSTILL = 1.2


async def test_a_job_that_kills_its_only_supervisor_each_time_is_failed_after_max_losses(
    connect: Connect,
) -> None:
    store = await connect()
    await store.dispatch(new_job("poison"))
    for _ in range(2):
        # A fresh supervisor process (its host rebooted) claims the job, as it does
        # every half second (a lease that ended while nobody claimed waits a while for
        # a witness)...
        supervisor = await connect()
        await claim_as_supervisors_do(supervisor, lease_ttl=SHORT_TTL, max_lease_losses=2)
        # ...which kills it: nobody writes to the store until the host is back.
        await anyio.sleep(HOST_DOWN)

    batch = await claim_as_supervisors_do(await connect(), max_lease_losses=2)

    assert (batch.recovered, batch.jobs) == (1, ())
    assert batch.recoveries == (LeaseRecovery("poison", OWNER, True, 2, "failed"),)
    record = await store.job("poison")
    assert (record.state, record.lease_losses) == ("failed", 2)
    assert record.error is not None and "lease lost 2 times (limit 2)" in record.error


async def test_a_lease_that_ran_out_while_the_store_stood_still_is_not_counted(
    connect: Connect, store_target: StoreTarget, redis_ports: list[int]
) -> None:
    holder, other = await connect(), await connect()
    await holder.dispatch(new_job("k1"))
    await claim_one(holder, lease_ttl=SHORT_TTL, max_lease_losses=1)
    await claim(other, 0, owner="other")  # it has heard from the store before

    async with standing_still(store_target, redis_ports, STANDSTILL):
        # Sent while the store stands still; it runs once the store moves again, after
        # the lease's end: the claiming supervisor saw the store failing over it.
        batch = await claim(other, 1, owner="other", max_lease_losses=1)

    assert batch.recovered == 1
    assert batch.recoveries == (LeaseRecovery("k1", OWNER, False, 0, "requeued"),)
    (job,) = batch.jobs
    assert (job.key, job.attempt) == ("k1", 1)
    assert (await other.job("k1")).lease_losses == 0


async def test_a_lease_that_ran_out_while_its_holder_saw_the_store_standing_still_is_not_counted(
    connect: Connect, store_target: StoreTarget, redis_ports: list[int]
) -> None:
    holder = await connect()
    await holder.dispatch(new_job("k1"))
    await claim_one(holder, lease_ttl=SHORT_TTL, max_lease_losses=1)

    async with standing_still(store_target, redis_ports, STANDSTILL):
        batch = await claim(holder, 1, max_lease_losses=1)

    assert batch.recovered == 1
    assert [job.key for job in batch.jobs] == ["k1"]
    assert (await holder.job("k1")).lease_losses == 0


async def test_a_lease_that_ran_out_before_the_store_stood_still_counts(
    connect: Connect, store_target: StoreTarget, redis_ports: list[int]
) -> None:
    holder, other = await connect(), await connect()
    await holder.dispatch(new_job("k1"))
    await claim_one(holder, lease_ttl=SHORT_TTL, max_lease_losses=1)
    await claim(other, 0, owner="other")
    await anyio.sleep(SHORT_TTL + 0.3)  # its holder died: the lease ran out

    async with standing_still(store_target, redis_ports, STANDSTILL):
        await claim(other, 0, owner="other", max_lease_losses=1)
    # Nobody claimed between the lease's end and the standstill: the witness of the
    # standstill did not see that end, and once the gap ended JUDGE_AFTER_GAP ago, any
    # claim judges it.
    await claim_as_supervisors_do(other, 0, owner="other", max_lease_losses=1)

    record = await other.job("k1")
    assert (record.state, record.lease_losses) == ("failed", 1)


async def test_a_lease_that_ended_while_nobody_reached_the_store_waits_for_a_witness(
    connect: Connect,
) -> None:
    """Nobody claimed for longer than MIN_CLAIM_GAP: the first claim after, from a
    supervisor that saw no failure, leaves the lease alone; once the gap ended
    JUDGE_AFTER_GAP ago, with no witness come, a claim judges it and counts it."""
    holder = await connect()
    await holder.dispatch(new_job("k1"))
    await claim_one(holder, lease_ttl=SHORT_TTL, max_lease_losses=2)
    await anyio.sleep(MIN_CLAIM_GAP + 0.3)  # its lease ran out inside the gap

    newcomer = await connect()
    first = await claim(newcomer, 0, owner="newcomer", max_lease_losses=2)
    assert (first.recovered, first.recoveries, first.left_to_witness) == (0, (), 1)
    assert (await newcomer.job("k1")).state == "running"
    await anyio.sleep(JUDGE_AFTER_GAP)
    later = await claim(newcomer, 0, owner="newcomer", max_lease_losses=2)

    assert later.recovered == 1
    record = await newcomer.job("k1")
    assert (record.state, record.lease_losses) == ("pending", 1)


async def test_a_lease_whose_renewals_fell_in_the_gap_waits_for_a_witness(
    connect: Connect,
) -> None:
    """It ended a little after the gap, within a ttl of it: its holder could not renew
    during the gap (found by the 30-minute --overlap chaos run)."""
    holder = await connect()
    await holder.dispatch(new_job("k1"))
    await claim_one(holder, lease_ttl=RENEWED_TTL, max_lease_losses=2)
    await anyio.sleep(MIN_CLAIM_GAP + 0.2)  # nobody reaches the store: a gap
    other = await connect()
    for _ in range(3):  # then claims every 0.3 s again, none recovering anything yet
        assert (await claim(other, 0, owner="other", max_lease_losses=2)).recovered == 0
        await anyio.sleep(0.3)
    await anyio.sleep(RENEWED_TTL - MIN_CLAIM_GAP - 0.2 - 0.9 + 0.3)  # the lease has ended

    batch = await claim(other, 0, owner="other", max_lease_losses=2)

    assert (batch.recovered, batch.left_to_witness) == (0, 1)
    assert (await other.job("k1")).state == "running"


async def test_a_claim_held_up_past_half_a_lease_hands_out_nothing(
    connect: Connect, store_target: StoreTarget, redis_ports: list[int]
) -> None:
    """Found by the 30-minute --overlap chaos run: a draining supervisor's claim, held
    by a frozen Redis, ran after that supervisor had exited; the jobs it handed out ran
    nowhere until their leases ran out, and each counted as a lease loss.  A claim that
    runs more than half a lease after it was sent claims nothing (its jobs' fences
    would be near anyway)."""
    store = await connect()
    await store.dispatch(new_job("k1"))
    await claim(store, 0)  # it has heard from the store: it knows the store's clock

    async with standing_still(store_target, redis_ports, HELD_UP):
        late = await claim(store, 1, lease_ttl=2 * HELD_UP - 1.0)

    assert late.jobs == ()
    assert (await store.job("k1")).state == "pending"
    assert [job.key for job in (await claim(store, 1)).jobs] == ["k1"]


@pytest.fixture
def redis_ports(request: pytest.FixtureRequest, store_target: StoreTarget) -> list[int]:
    """The Redis servers behind the test's store (none for SQLite)."""
    if store_target.kind == "cluster":
        cluster: RedisClusterNodes = request.getfixturevalue("redis_cluster")
        return [node.port for node in cluster.nodes]
    if store_target.kind == "redis":
        port = urlsplit(store_target.url).port
        assert port is not None
        return [port]
    return []


@asynccontextmanager
async def standing_still(
    target: StoreTarget, redis_ports: list[int], seconds: float
) -> AsyncIterator[None]:
    """The store takes no write for `seconds` from entering: Redis paused for writes
    (every node of a cluster), SQLite locked by another connection's write
    transaction, PostgreSQL's pool lock held by another connection's transaction.  The
    block runs while it stands still."""
    if target.kind == "postgres":
        async def hold_the_pool_lock(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            async with await psycopg.AsyncConnection.connect(target.url) as conn:
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                                   [f"poolsup:{target.pool}"])
                task_status.started()
                await anyio.sleep(seconds)
                await conn.commit()

        async with anyio.create_task_group() as group:
            await group.start(hold_the_pool_lock)
            yield
        return
    if target.kind != "sqlite":
        for port in redis_ports:
            with redis.Redis(port=port) as admin:
                admin.execute_command("CLIENT", "PAUSE", int(seconds * 1000), "WRITE")
        yield
        return
    locked = threading.Event()

    def hold_the_lock() -> None:
        conn = sqlite3.connect(path_from_url(target.url), isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            locked.set()
            time.sleep(seconds)
            conn.execute("COMMIT")
        finally:
            conn.close()

    async with anyio.create_task_group() as group:
        group.start_soon(anyio.to_thread.run_sync, hold_the_lock)
        await anyio.to_thread.run_sync(locked.wait)
        yield
