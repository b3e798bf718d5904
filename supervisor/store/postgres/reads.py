"""The PostgreSQL store's read of one job: one statement on its own, outside any
transaction (one snapshot, one round trip); every other read is sql/reads.py's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from supervisor.errors import JobNotFound
from supervisor.store.postgres.history import of_row
from supervisor.store.records import JobRecord
from supervisor.store.sql.reads import SqlReads
from supervisor.store.sql.records import job_record

if TYPE_CHECKING:
    from supervisor.store.postgres.db import PgDatabase


class PgReads(SqlReads):
    _db: PgDatabase  # the store's (postgres/store.py)

    async def job(self, key: str) -> JobRecord:
        rows = await self._db.read_one("job_with_events", key=key,
                                       retention=self._ctx.retention)
        if not rows:
            raise JobNotFound(f"no job has the key {key!r}")
        return job_record(rows[0], of_row(rows[0]))
