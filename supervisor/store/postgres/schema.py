"""The PostgreSQL store's schema and statements: the tables of `sql/schema.sql` and the
functions of `sql/functions.sql` in the schema `poolsup`, their version in
`poolsup.schema_version`, the migrations from each shipped version to the next, and the
named SQL statements of `sql/queries.sql`.

The supervisor (and any command) creates or migrates the schema itself, at its first
transaction, under a transaction-scoped advisory lock (SCHEMA_LOCK) that every starter
takes, so that concurrent starters create it once.  A database whose schema is newer
than this poolsup knows is a `ConfigError`, never a reset.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import resources

from psycopg import AsyncConnection
from psycopg.rows import DictRow

from supervisor.errors import ConfigError
from supervisor.store.sql import statements

SCHEMA_VERSION = 4
SCHEMA_LOCK = "poolsup schema"
# The statements that take the tables of a database at version N to N + 1; the functions
# (sql/functions.sql) are made again after every migration.
MIGRATIONS: Mapping[int, str] = {
    # 2: poolsup.dispatch_jobs forgets what an earlier record of a key left (its events,
    # output, notes) only when there was one: functions only.
    1: "SELECT 1",
    # 3: a claim starts its jobs, ends, and a completion ends one, in one function each
    # (start_jobs, after_claim, complete_job, note_event): functions only.
    2: "SELECT 1",
    # 4: a job's history moves into its row (poolsup.jobs.history), written by the
    # statement of its change instead of a row of job_events each.  The table job_events
    # stays, emptied: supervisors of version 3 still read and write it during a rolling
    # upgrade (the functions they call write the new column).  A job's end is notified
    # only while a caller waits for it (poolsup.end_waiters): a `wait` of version 3, which
    # does not say it waits, sees the end by its reread every 5 s.
    3: """
        ALTER TABLE poolsup.jobs ADD COLUMN history jsonb NOT NULL DEFAULT '[]';
        UPDATE poolsup.jobs j SET history = e.events
        FROM (SELECT pool, key, jsonb_agg(jsonb_build_array(at, event, supervisor, token,
                                                            detail) ORDER BY id) AS events
              FROM poolsup.job_events GROUP BY pool, key) AS e
        WHERE j.pool = e.pool AND j.key = e.key;
        DELETE FROM poolsup.job_events;
        CREATE TABLE poolsup.end_waiters (
            pool text NOT NULL,
            key text NOT NULL,
            waiter text NOT NULL
        );
        CREATE INDEX end_waiters_by_key ON poolsup.end_waiters (pool, key);
    """,
}



def _sql_file(name: str) -> str:
    return resources.files("supervisor.store.postgres").joinpath(f"sql/{name}").read_text("utf-8")


@functools.cache
def load_queries() -> dict[str, str]:
    """The named statements: sql/queries.sql's and those of store/sql/queries.sql."""
    shared = {name: statements.for_postgres(body) for name, body in statements.shared().items()}
    return statements.merged(statements.sections(_sql_file("queries.sql")), shared)


def schema_sql() -> str:
    return _sql_file("schema.sql")


def functions_sql() -> str:
    return _sql_file("functions.sql")


async def schema_version(conn: AsyncConnection[DictRow]) -> int:
    """0 for a database without the poolsup schema."""
    cursor = await conn.execute("SELECT to_regclass('poolsup.schema_version') IS NOT NULL AS ok")
    row = await cursor.fetchone()
    if row is None or not row["ok"]:
        return 0
    cursor = await conn.execute("SELECT max(version) AS version FROM poolsup.schema_version")
    row = await cursor.fetchone()
    return int(row["version"] or 0) if row is not None else 0


async def ensure_schema(conn: AsyncConnection[DictRow], where: str) -> None:
    """Create or migrate the schema, in the caller's transaction."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [SCHEMA_LOCK])
    version = await schema_version(conn)
    if version > SCHEMA_VERSION:
        raise ConfigError(f"{where}: the schema poolsup was written by a newer poolsup "
                          f"(version {version}; this one knows {SCHEMA_VERSION}): upgrade "
                          "poolsup")
    if version == SCHEMA_VERSION:
        return
    if version == 0:
        await conn.execute(schema_sql().encode())
    else:
        for step in range(version, SCHEMA_VERSION):
            await conn.execute(MIGRATIONS[step].encode())
    await conn.execute(functions_sql().encode())
    await conn.execute("DELETE FROM poolsup.schema_version")
    await conn.execute("INSERT INTO poolsup.schema_version (version) VALUES (%s)",
                       [SCHEMA_VERSION])
