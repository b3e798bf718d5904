"""The SQLite store's reads: a job, jobs by state, a page of jobs by key (on the
(pool, key) index), the newest finished by finish time, the members, the counts and the
pool's snapshot for `status` (a part of SqliteStore: sqlite/context.py)."""

from __future__ import annotations

from collections.abc import Sequence

from supervisor.errors import JobNotFound, StoreFailure
from supervisor.store.paging import checked_finished, checked_limit, prefix_upper_bound
from supervisor.store.policy import HEALTH_GAP, LIVE_TTLS, MEMBER_GARBAGE_AFTER
from supervisor.store.records import JobRecord, JobState, Membership, PoolSnapshot
from supervisor.store.sqlite import history
from supervisor.store.sqlite.context import SqlitePart
from supervisor.store.sqlite.db import Tx
from supervisor.store.sqlite.records import (
    job_record,
    read_counts,
    read_members,
    read_pending_by_handler,
    read_snapshot,
)


class SqliteReads(SqlitePart):
    async def job(self, key: str) -> JobRecord:
        def work(tx: Tx) -> JobRecord:
            row = tx.row("job_record", key=key, cutoff=self._ctx.cutoff(tx))
            if row is None:
                raise JobNotFound(f"no job has the key {key!r}")
            return job_record(row, tx, history.of_job(tx, key))

        return await self._ctx.db.read(work)

    async def jobs(self, state: JobState | None = None) -> list[JobRecord]:
        def work(tx: Tx) -> list[JobRecord]:
            tx.run("drop_expired_records", cutoff=self._ctx.cutoff(tx))
            rows = tx.rows("all_jobs") if state is None else tx.rows("jobs_in_state",
                                                                      state=state)
            events = history.of_jobs(tx, [row["key"] for row in rows])
            return [job_record(row, tx, events.get(row["key"], ())) for row in rows]

        return await self._ctx.db.write(work)

    async def jobs_page(self, state: JobState | None = None, *, prefix: str = "",
                        after: str = "", limit: int = 50) -> list[JobRecord]:
        checked_limit(limit)  # before the worker thread: a caller's error, not the store's

        def work(tx: Tx) -> list[JobRecord]:
            rows = tx.rows("jobs_page", state=state, prefix=prefix, after=after,
                           upper=prefix_upper_bound(prefix), cutoff=self._ctx.cutoff(tx),
                           limit=limit)
            return [job_record(row, tx) for row in rows]

        return await self._ctx.db.read(work)

    async def latest_finished(self, state: JobState, limit: int = 20) -> list[JobRecord]:
        checked_finished(state)
        checked_limit(limit)

        def work(tx: Tx) -> list[JobRecord]:
            rows = tx.rows("latest_finished", state=state, cutoff=self._ctx.cutoff(tx),
                           limit=limit)
            return [job_record(row, tx) for row in rows]

        return await self._ctx.db.read(work)

    async def members(self) -> Membership:
        return await self._ctx.db.read(read_members)

    async def pending_by_handler(self, handlers: Sequence[str]) -> dict[str, int]:
        counts = await self._ctx.db.read(read_pending_by_handler)
        return {handler: counts.get(handler, 0) for handler in handlers}

    async def counts(self) -> dict[str, int]:
        return await self._ctx.db.read(lambda tx: read_counts(tx, self._ctx.cutoff(tx)))

    async def snapshot(self) -> PoolSnapshot:
        def tidy(tx: Tx) -> None:
            tx.run("drop_expired_records", cutoff=self._ctx.cutoff(tx))
            tx.run("drop_silent_supervisors", live_ttls=LIVE_TTLS,
                   garbage_after=MEMBER_GARBAGE_AFTER)
            tx.run("touch_health", gap=HEALTH_GAP)

        error = None
        try:
            await self._ctx.db.write(tidy)
        except StoreFailure as exc:  # a file that takes no writes may still be read
            error = exc.message
        return await self._ctx.db.read(
            lambda tx: read_snapshot(tx, self._ctx.pool, self._ctx.cutoff(tx), error))
