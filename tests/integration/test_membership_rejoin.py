"""A supervisor whose membership entry is gone (deleted by hand, or lost by the store)
registers again by itself and keeps serving (pool/membership.py, its own loop)."""

from __future__ import annotations

import anyio

from supervisor.store import opened_store
from tests.helpers.pool import wait_for
from tests.integration.conftest import Pool

HANDLERS = {"quick": {"path": "outcomes.py", "function": "sleeps"}}


def members(pool: Pool) -> dict[str, str]:
    async def read() -> dict[str, str]:
        async with opened_store(pool.store, pool.name) as store:
            return {member.info.id: member.info.instance
                    for member in (await store.members()).members}

    return anyio.run(read)


def deregister(pool: Pool, supervisor_id: str, instance: str) -> None:
    async def write() -> None:
        async with opened_store(pool.store, pool.name) as store:
            await store.deregister(supervisor_id, instance)

    anyio.run(write)


def test_a_supervisor_whose_entry_is_gone_registers_again(pool: Pool) -> None:
    config = pool.config(HANDLERS, id="web-1", capacity=1, lease_ttl=2)
    supervisor = pool.start(config)
    instance = wait_for(lambda: members(pool).get("web-1"), 10, message="registered")

    deregister(pool, "web-1", instance)

    wait_for(lambda: "registering again" in supervisor.log(), 10, message="rejoin logged")
    assert wait_for(lambda: members(pool).get("web-1"), 10, message="registered again") == \
        instance
    client = pool.client()
    client.dispatch("after", {"seconds": 0.1}, handler="quick")
    wait_for(lambda: client.job("after")["state"] == "succeeded", 20,
             message="a job runs after the rejoin")
