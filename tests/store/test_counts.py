"""`Store.counts`: the jobs of each state, in one cheap read-only call."""

from __future__ import annotations

import time
from dataclasses import replace

import anyio
import pytest

from supervisor.store.base import Store
from supervisor.store.records import ALL_STATES
from tests.store.conftest import Connect
from tests.store.support import claim, claim_one, dispatch_all, new_job

pytestmark = pytest.mark.anyio


async def test_an_empty_pool_counts_zero_of_every_state(store: Store) -> None:
    assert await store.counts() == dict.fromkeys(ALL_STATES, 0)


async def test_counts_follow_every_state(store: Store) -> None:
    await dispatch_all(store, ["ok", "bad", "held", "run", "wait-1", "wait-2"])
    ok, bad, *_still_running = (await claim(store, 4)).jobs
    await store.complete(ok.lease, b"1")
    await store.fail(bad.lease, "boom", final=True, retry_delay=0.0)
    await store.stop("wait-2")

    counts = await store.counts()

    assert counts == {"pending": 1, "running": 2, "succeeded": 1, "failed": 1, "stopped": 1}
    assert counts == (await store.snapshot()).counts


async def test_counts_leave_out_records_past_the_retention_period(connect: Connect) -> None:
    store = await connect(retention=1.0)
    await store.dispatch(new_job("k1"))
    await store.complete((await claim_one(store)).lease, b"1")
    assert (await store.counts())["succeeded"] == 1

    await anyio.sleep(1.5)

    assert (await store.counts())["succeeded"] == 0


async def test_pending_jobs_are_counted_per_handler(store: Store) -> None:
    """What `poolsup_jobs{state="pending",handler=...}` shows (an autoscaler's input):
    every priority, delayed jobs too; running ones and other handlers' not."""
    later = time.time() + 3600
    # A supervisor's first claim brings a Redis pool's keys up to date
    # (lua/upgrade-layout-3.lua), which re-queues a priority job dispatched before it in
    # its handler's priority-0 queue too: counted twice there until it is claimed.
    await claim(store, 1, handlers=("none",))
    await store.dispatch(new_job("a1", handler="a"))
    await store.dispatch(replace(new_job("a2", handler="a"), priority=7))
    await store.dispatch(replace(new_job("a3", handler="a"), run_at=later))
    await store.dispatch(new_job("b1", handler="b"))
    await store.dispatch(new_job("b2", handler="b"))
    await store.dispatch(new_job("other", handler="c"))
    assert await store.pending_by_handler(["a", "b", "idle"]) == {"a": 3, "b": 2, "idle": 0}
    await claim(store, 1, handlers=("b",))
    assert await store.pending_by_handler(["a", "b"]) == {"a": 3, "b": 1}
