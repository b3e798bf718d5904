"""Settle (supervisor/job/settle.py) against a real Redis whose reply to one complete is
lost after the write went through: the settle tries again, finds its result stored
under its own lease, and claims nothing on the way (so nothing is orphaned)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox.protocol import fence_clock
from supervisor.config import HandlerConfig
from supervisor.core.outcome import Complete
from supervisor.errors import StoreUnavailable
from supervisor.job.running import Registry, RunningJob
from supervisor.job.settle import Settler
from supervisor.observe.store_failures import StoreFailures
from supervisor.store.base import Store
from supervisor.store.records import DispatchRequest, Lease

pytestmark = pytest.mark.anyio


class LosesOneCompleteReply:
    """A store whose first `complete` is carried out, and then its reply lost."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.completes = 0

    async def complete(self, lease: Lease, result: bytes) -> None:
        self.completes += 1
        await self._store.complete(lease, result)
        if self.completes == 1:
            raise StoreUnavailable("reply lost")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)



async def test_a_lost_reply_to_a_complete_is_settled_by_its_retry_and_orphans_nothing(
    redis_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    store = redis_store
    for key in ("done", "waiting"):
        await store.dispatch(DispatchRequest(key=key, handler="h", payload=b"{}",
                                             max_attempts=3))
    (claimed,) = (await store.claim("sup-a", ["h"], 1, 30.0, 5)).jobs
    handler = HandlerConfig(name="h", path=Path("/h.py"), rebalance=False)
    job = RunningJob(claimed=claimed, handler=handler, fork_server=None,  # type: ignore[arg-type]
                     fence_at=fence_clock() + 30)
    registry = Registry(slot_freed=lambda: None)
    registry.add(job)
    lossy = LosesOneCompleteReply(store)
    settler = Settler(lossy, registry, StoreFailures("storing outcomes"),  # type: ignore[arg-type]
                      lease_ttl=30.0, draining=anyio.Event())

    with caplog.at_level(logging.INFO):
        stored = await settler.settle(job, Complete(b'{"ok": true}'))

    assert stored and lossy.completes == 2
    record = await store.job(claimed.key)
    assert (record.state, record.result) == ("succeeded", {"ok": True})
    assert "lease lost" not in caplog.text
    assert (await store.job("waiting")).state == "pending"  # claimed by nobody
