"""The SQL stores' reads: a job, jobs by state, a page of jobs by key (on the (pool,
key) index), the newest finished by finish time, the members, the counts and the
pool's snapshot for `status` (a part of both SQL stores: context.py)."""

from __future__ import annotations

from collections.abc import Sequence

from supervisor.errors import JobNotFound, StoreFailure
from supervisor.store.paging import checked_finished, checked_limit, prefix_upper_bound
from supervisor.store.policy import HEALTH_GAP, LIVE_TTLS, MEMBER_GARBAGE_AFTER
from supervisor.store.records import JobRecord, JobState, Membership, PoolSnapshot
from supervisor.store.sql.context import SqlPart
from supervisor.store.sql.records import (
    job_record,
    read_counts,
    read_members,
    read_pending_by_handler,
    read_snapshot,
)
from supervisor.store.sql.tx import Tx


class SqlReads(SqlPart):
    async def job(self, key: str) -> JobRecord:
        async def work(tx: Tx) -> JobRecord:
            row = await tx.row("job_record", key=key, cutoff=self._ctx.cutoff(tx))
            if row is None:
                raise JobNotFound(f"no job has the key {key!r}")
            (events,) = await tx.histories([row])
            return job_record(row, events, wall_time=tx.wall_time)

        return await self._ctx.db.read(work)

    async def jobs(self, state: JobState | None = None) -> list[JobRecord]:
        async def work(tx: Tx) -> list[JobRecord]:
            await tx.run("drop_expired_records", cutoff=self._ctx.cutoff(tx))
            rows = await tx.rows("all_jobs") if state is None else await tx.rows(
                "jobs_in_state", state=state)
            return [job_record(row, events, wall_time=tx.wall_time)
                    for row, events in zip(rows, await tx.histories(rows), strict=True)]

        return await self._ctx.db.write(work)

    async def jobs_page(self, state: JobState | None = None, *, prefix: str = "",
                        after: str = "", limit: int = 50) -> list[JobRecord]:
        checked_limit(limit)  # before the transaction: a caller's error, not the store's

        async def work(tx: Tx) -> list[JobRecord]:
            rows = await tx.rows("jobs_page", state=state, prefix=prefix, after=after,
                                 upper=prefix_upper_bound(prefix),
                                 cutoff=self._ctx.cutoff(tx), limit=limit)
            return [job_record(row, wall_time=tx.wall_time) for row in rows]

        return await self._ctx.db.read(work)

    async def latest_finished(self, state: JobState, limit: int = 20) -> list[JobRecord]:
        checked_finished(state)
        checked_limit(limit)  # before the transaction: a caller's error, not the store's

        async def work(tx: Tx) -> list[JobRecord]:
            rows = await tx.rows("latest_finished", state=state, cutoff=self._ctx.cutoff(tx),
                                 limit=limit)
            return [job_record(row, wall_time=tx.wall_time) for row in rows]

        return await self._ctx.db.read(work)

    async def members(self) -> Membership:
        return await self._ctx.db.read(read_members)

    async def pending_by_handler(self, handlers: Sequence[str]) -> dict[str, int]:
        counts = await self._ctx.db.read(read_pending_by_handler)
        return {handler: counts.get(handler, 0) for handler in handlers}

    async def counts(self) -> dict[str, int]:
        return await self._ctx.db.read(lambda tx: read_counts(tx, self._ctx.cutoff(tx)))

    async def snapshot(self) -> PoolSnapshot:
        async def tidy(tx: Tx) -> None:
            await tx.run("drop_expired_records", cutoff=self._ctx.cutoff(tx))
            await tx.run("drop_silent_supervisors", live_ttls=LIVE_TTLS,
                         garbage_after=MEMBER_GARBAGE_AFTER)
            await tx.run("touch_health", gap=HEALTH_GAP)

        error = None
        try:
            await self._ctx.db.write(tidy)
        except StoreFailure as exc:  # a file or a standby that takes no writes may still be read
            error = exc.message
        return await self._ctx.db.read(
            lambda tx: read_snapshot(tx, self._ctx.pool, self._ctx.cutoff(tx), error))
