"""The PostgreSQL store's own connections: a dispatch is one statement run on its own
(autocommit), and a connection it leaves must never be kept in autocommit, where the
next transaction's statements (a claim's, under the pool's lock) would each commit on
their own; a connection the server ended while it was idle is not used again."""

from __future__ import annotations

import anyio
import psycopg
import pytest
from psycopg.types.json import Jsonb

from supervisor.errors import StoreUnavailable
from supervisor.store import opened_store
from supervisor.store.postgres import db as pg_db
from tests.helpers.postgres_server import PostgresServer
from tests.store.support import HANDLER, new_job

pytestmark = pytest.mark.anyio


async def test_a_dispatch_cut_short_leaves_no_connection_in_autocommit(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = postgres_server.fresh_database()
    monkeypatch.setattr(pg_db, "STORE_TIMEOUT", 0.5)
    async with opened_store(url, "p") as store:
        await store.dispatch(new_job("first"))  # the schema is made
        with psycopg.connect(url) as blocker:  # holds the key "k" until it rolls back
            blocker.execute("SELECT poolsup.dispatch_jobs('p', 86400, %s)", [Jsonb(
                [{"key": "k", "handler": HANDLER, "payload": "{}", "max_attempts": 1}])])
            with pytest.raises(StoreUnavailable, match="no answer within"):
                await store.dispatch(new_job("k"))
            blocker.rollback()
        kept = list(store._ctx.db._pool._idle)  # type: ignore[attr-defined]
        assert not any(conn.autocommit for conn in kept)
        # The claim is one transaction again.  (The dispatch cut short may still be
        # added by the server once the key is free: its outcome is unknown to the caller,
        # as after any store call that got no answer.)
        batch = await store.claim("s", [HANDLER], 2, 30.0, 3)
        assert "first" in [job.key for job in batch.jobs]


async def test_a_connection_the_server_ended_while_idle_is_not_used_again(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.fresh_database()
    async with opened_store(url, "p") as store:
        await store.dispatch(new_job("first"))
        with psycopg.connect(url, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()
            assert ended is not None and ended[0] >= 1
            # pg_terminate_backend only signals: wait until they are gone.
            deadline = anyio.current_time() + 10
            while admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid()").fetchone() != (0,):
                assert anyio.current_time() < deadline, "the backends did not end"
                await anyio.sleep(0.02)
        # A dispatch is never tried twice: it must not meet the ended connection.
        await store.dispatch(new_job("second"))
        assert (await store.job("second")).state == "pending"


async def test_a_supervisor_frozen_inside_a_transaction_does_not_hold_the_pool(
    postgres_server: PostgresServer,
) -> None:
    """Its transaction holds the pool's lock, and the others' claims and renewals wait
    for it; after LOCK_WAIT one of them ends the session, whose transaction began
    STUCK_AFTER ago, and goes on."""
    url = postgres_server.fresh_database()
    async with opened_store(url, "p") as frozen, opened_store(url, "p") as other:
        await other.dispatch(new_job("k1"))
        locked = anyio.Event()

        async def freezes(tx: object) -> None:
            locked.set()  # the pool's lock is held from the transaction's first read
            await anyio.sleep(4.5)  # a client that sends nothing more, as if SIGSTOPped

        async def hold() -> None:
            with pytest.raises(StoreUnavailable):
                await frozen._ctx.db.write(freezes)  # type: ignore[attr-defined]

        async with anyio.create_task_group() as group:
            group.start_soon(hold)
            await locked.wait()
            started = anyio.current_time()
            batch = await other.claim("s", [HANDLER], 1, 30.0, 3)
            waited = anyio.current_time() - started
        assert [job.key for job in batch.jobs] == ["k1"]
        assert waited < 4, waited
