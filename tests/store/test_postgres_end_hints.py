"""A job's end is notified on PostgreSQL only while a caller waits for it: each NOTIFY is
read by every backend that listens in the database (every supervisor's), whatever its
channel, so an end that nobody waits for is not sent (poolsup.end_waiters)."""

from __future__ import annotations

import anyio
import psycopg
import pytest

from supervisor.store import opened_store
from supervisor.waiting import wait_for_end
from tests.helpers.postgres_server import PostgresServer
from tests.store.support import claim_one, new_job

pytestmark = pytest.mark.anyio


def end_channel(conn: psycopg.Connection, key: str) -> str:
    row = conn.execute("SELECT poolsup.channel('p', %s)", [f"end\n{key}"]).fetchone()
    assert row is not None
    return str(row[0])


async def test_an_end_nobody_waits_for_is_not_notified_and_a_waited_one_is(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.fresh_database()
    async with opened_store(url, "p") as store:
        for key in ("unwatched", "watched"):
            await store.dispatch(new_job(key))
        with psycopg.connect(url, autocommit=True) as listener:
            for key in ("unwatched", "watched"):
                listener.execute(f'LISTEN "{end_channel(listener, key)}"')

            job = await claim_one(store)
            assert job.key == "unwatched"
            await store.complete(job.lease, b"1")
            assert list(listener.notifies(timeout=0.5)) == []

            job = await claim_one(store)
            async with anyio.create_task_group() as group:
                async def complete_soon() -> None:
                    await anyio.sleep(0.3)
                    await store.complete(job.lease, b"2")

                group.start_soon(complete_soon)
                with anyio.fail_after(3.0):  # well before the wait's safety reread
                    record = await wait_for_end(store, "watched", None)
            assert record.state == "succeeded"
            heard = list(listener.notifies(timeout=0.5, stop_after=1))
            assert [notify.channel for notify in heard] == [end_channel(listener, "watched")]
            waiters = listener.execute("SELECT count(*) FROM poolsup.end_waiters").fetchone()
            assert waiters == (0,)
