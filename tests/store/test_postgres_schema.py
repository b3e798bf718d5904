"""The PostgreSQL store makes its own schema `poolsup`, once, whatever number of
supervisors start together on a fresh database; it refuses a schema written by a newer
poolsup; several pools share the database; each shipped version migrates to the next
(postgres_schema_vN.sql: the schema as version N shipped it)."""

from __future__ import annotations

from pathlib import Path

import anyio
import psycopg
import pytest
from psycopg.types.json import Jsonb

from supervisor.errors import ConfigError
from supervisor.store import opened_store
from supervisor.store.policy import NO_LOCK_DELAY_ENV
from supervisor.store.postgres.schema import SCHEMA_VERSION
from tests.helpers.postgres_server import PostgresServer
from tests.store.support import HANDLER, new_job

pytestmark = pytest.mark.anyio


async def test_supervisors_starting_together_make_the_schema_once(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.fresh_database()

    async def start(index: int) -> None:
        async with opened_store(url, f"pool-{index % 2}") as store:
            await store.dispatch(new_job(f"k{index}"))

    async with anyio.create_task_group() as group:
        for index in range(6):
            group.start_soon(start, index)

    with psycopg.connect(url) as conn:
        versions = conn.execute("SELECT version FROM poolsup.schema_version").fetchall()
        per_pool = conn.execute("SELECT pool, count(*) FROM poolsup.jobs GROUP BY pool "
                                "ORDER BY pool").fetchall()
    assert versions == [(SCHEMA_VERSION,)]
    assert per_pool == [("pool-0", 3), ("pool-1", 3)]


async def test_a_schema_of_a_newer_poolsup_is_refused_in_one_line(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.fresh_database()
    async with opened_store(url, "p") as store:
        await store.ping()
        await store.pause(["h"])
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE poolsup.schema_version SET version = %s", [SCHEMA_VERSION + 1])

    async with opened_store(url, "p") as store:
        with pytest.raises(ConfigError) as caught:
            await store.pause(["h"])
    assert "newer poolsup" in caught.value.message and "\n" not in caught.value.message


async def test_a_database_of_the_shipped_schema_1_migrates_to_2_and_keeps_its_jobs(
    postgres_server: PostgresServer,
) -> None:
    """Schema 1 (tests/store/postgres_schema_v1.sql, as shipped) -> 2: the functions are
    made again (dispatch_jobs forgets an earlier record's leftovers only when there was
    one); every job, its history and its notes stay."""
    url = postgres_server.fresh_database()
    with psycopg.connect(url) as conn:
        conn.execute((Path(__file__).parent / "postgres_schema_v1.sql").read_bytes())
        conn.execute("INSERT INTO poolsup.schema_version (version) VALUES (1)")
        conn.execute("INSERT INTO poolsup.counters (pool) VALUES ('p')")
        codes = conn.execute(
            "SELECT poolsup.dispatch_jobs('p', 86400, %s)",
            [Jsonb([{"key": "old", "handler": HANDLER, "payload": "{}", "max_attempts": 1}])],
        ).fetchone()
        assert codes == ([1],)

    async with opened_store(url, "p") as store:
        await store.notify("old", b'{"n": 1}')
        assert [event.event for event in (await store.job("old")).events] == ["dispatched"]
        await store.dispatch(new_job("new"))
        batch = await store.claim("s", [HANDLER], 2, 10.0, 3)
        assert sorted(job.key for job in batch.jobs) == ["new", "old"]
        old = next(job for job in batch.jobs if job.key == "old")
        assert old.has_notes
        await store.complete(old.lease, b"1")
        await store.dispatch(new_job("old"))  # again: its history starts anew
        assert [event.event for event in (await store.job("old")).events] == ["dispatched"]

    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT version FROM poolsup.schema_version").fetchall() == [
            (SCHEMA_VERSION,)]
        body = conn.execute("SELECT pg_get_functiondef('poolsup.dispatch_jobs'::regproc)"
                            ).fetchone()
        assert body is not None and "v_found" in body[0]  # version 2's


async def test_a_database_of_schema_2_migrates_to_3_and_its_jobs_start_and_complete(
    postgres_server: PostgresServer,
) -> None:
    """Schema 2 (tests/store/postgres_schema_v2.sql) -> 3: a claim starts its jobs and a
    completion ends one in one function each; a job dispatched under 2 runs under 3,
    with the same history."""
    url = postgres_server.fresh_database()
    with psycopg.connect(url) as conn:
        conn.execute((Path(__file__).parent / "postgres_schema_v2.sql").read_bytes())
        conn.execute("INSERT INTO poolsup.schema_version (version) VALUES (2)")
        conn.execute("INSERT INTO poolsup.counters (pool) VALUES ('p')")
        conn.execute("SELECT poolsup.dispatch_jobs('p', 86400, %s)", [Jsonb(
            [{"key": "old", "handler": HANDLER, "payload": "{}", "max_attempts": 1}])])

    async with opened_store(url, "p") as store:
        (job,) = (await store.claim("s", [HANDLER], 1, 10.0, 3)).jobs
        assert (job.key, job.attempt) == ("old", 1)
        await store.complete(job.lease, b"1")
        record = await store.job("old")
        assert record.state == "succeeded"
        assert [(event.event, event.token) for event in record.events] == [
            ("dispatched", None), ("started", job.token), ("succeeded", job.token)]

    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT version FROM poolsup.schema_version").fetchall() == [
            (SCHEMA_VERSION,)]


async def test_a_database_of_schema_3_migrates_to_4_with_each_jobs_history_in_its_row(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Schema 3 (tests/store/postgres_schema_v3.sql) -> 4: the history moves from
    job_events into each job's row, in order, and goes on there; a job that ran under 3
    runs again under 4.  job_events stays, empty, for version 3's supervisors."""
    # Tokens were handed out before the pool's first epoch: its first claim would hold.
    monkeypatch.setenv(NO_LOCK_DELAY_ENV, "1")
    url = postgres_server.fresh_database()
    with psycopg.connect(url) as conn:
        conn.execute((Path(__file__).parent / "postgres_schema_v3.sql").read_bytes())
        conn.execute("INSERT INTO poolsup.schema_version (version) VALUES (3)")
        conn.execute("INSERT INTO poolsup.counters (pool) VALUES ('p')")
        conn.execute("SELECT poolsup.dispatch_jobs('p', 86400, %s)", [Jsonb(
            [{"key": key, "handler": HANDLER, "payload": "{}", "max_attempts": 3}
             for key in ("ran", "waits")])])
        conn.execute("SELECT * FROM poolsup.start_jobs('p', ARRAY['ran'], 's', 30, "
                     "poolsup.now(), 100)")
        conn.execute("SELECT poolsup.note_event('p', 'ran', poolsup.now(), 'released', 's', "
                     "1, 'drain', 100)")
        conn.execute("UPDATE poolsup.jobs SET state = 'pending', due = 0 WHERE key = 'ran'")

    async with opened_store(url, "p") as store:
        before = await store.job("ran")
        assert [(event.event, event.supervisor, event.token, event.detail)
                for event in before.events] == [
            ("dispatched", None, None, None), ("started", "s", 1, "attempt 1"),
            ("released", "s", 1, "drain")]
        assert [event.event for event in (await store.job("waits")).events] == ["dispatched"]
        jobs = (await store.claim("s2", [HANDLER], 2, 10.0, 3)).jobs
        ran = next(job for job in jobs if job.key == "ran")
        await store.complete(ran.lease, b"1")
        after = await store.job("ran")
        assert [event.event for event in after.events] == [
            "dispatched", "started", "released", "started", "succeeded"]
        assert after.events[3].detail == "attempt 2" and after.events[4].token == ran.token

    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT version FROM poolsup.schema_version").fetchall() == [
            (SCHEMA_VERSION,)]
        assert conn.execute("SELECT count(*) FROM poolsup.job_events").fetchone() == (0,)


async def test_a_fresh_pools_claims_analyze_its_tables_so_a_keys_lookup_uses_the_key(
    postgres_server: PostgresServer,
) -> None:
    """A fresh pool's first minutes, before autovacuum first analyzes poolsup.jobs (here
    it never does): without statistics the planner rated an index that holds `pool` as
    good as the primary key (pool, key), and each lookup of one job walked every row of
    the pool (`Rows Removed by Filter`).  The claims analyze the tables once (statistics.py)."""
    url = postgres_server.fresh_database()
    async with opened_store(url, "p") as store:
        await store.dispatch(new_job("first"))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER TABLE poolsup.jobs SET (autovacuum_enabled = false)")
            for index in range(500):
                await store.dispatch(new_job(f"k{index}"))

            def analyzed() -> bool:
                row = conn.execute("SELECT last_analyze FROM pg_stat_user_tables "
                                   "WHERE relid = 'poolsup.jobs'::regclass").fetchone()
                return row is not None and row[0] is not None

            deadline = anyio.current_time() + 20
            while not analyzed() and anyio.current_time() < deadline:
                await store.claim("s", [HANDLER], 1, 30.0, 3)
                await anyio.sleep(0.05)
            assert analyzed()
            for lookup in (
                "SELECT * FROM poolsup.jobs WHERE pool = 'p' AND key = 'k7' "
                "AND (finished_at IS NULL OR finished_at >= 0)",
                "SELECT 1 FROM poolsup.jobs WHERE pool = 'p' AND key = 'k7' "
                "AND state = 'pending'",
            ):
                plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN {lookup}"))
                assert "jobs_pkey" in plan, plan
