"""The SQL stores' steering of the pool: stops, pauses and the settings the store
enforces (a part of both SQL stores: context.py).  A pause is a row of `paused` (a
handler, or "*" for the whole pool), which every claim reads in its transaction
(limits.py `served`).  A stop of a running job is told to its holder; a resume wakes the
whole pool."""

from __future__ import annotations

from collections.abc import Sequence

from supervisor.errors import JobNotFound
from supervisor.store.records import LIVE_STATES, PAUSE_ALL, FiredTick, JobState, Paused
from supervisor.store.sql import dispatch as sql_dispatch
from supervisor.store.sql import history, leases
from supervisor.store.sql import limits as sql_limits
from supervisor.store.sql.context import SqlPart
from supervisor.store.sql.tx import Tx


class SqlSteering(SqlPart):
    async def stop(self, key: str, *, fired: FiredTick | None = None) -> JobState:
        async def work(tx: Tx) -> JobState:
            await sql_dispatch.check_current(tx, fired)
            state: JobState | None = await tx.value("job_state", key=key,
                                                    cutoff=self._ctx.cutoff(tx))
            if state is None:
                raise JobNotFound(f"no job has the key {key!r}")
            if state not in LIVE_STATES:
                return state
            if state == "running" and not await tx.value("stop_requested", key=key):
                await history.note(tx, key, "stopping", "stop")
            await tx.run("request_stop", key=key)
            if state == "pending":
                return await leases.finish(tx, key, "stopped", "stopped while pending")
            await tx.tell_holder(key, "stop")
            return state

        return await self._ctx.db.write(work)

    async def pause(self, handlers: Sequence[str] = ()) -> None:
        async def work(tx: Tx) -> None:
            for name in handlers or [PAUSE_ALL]:
                await tx.run("pause", name=name)

        await self._ctx.db.write(work)

    async def resume(self, handlers: Sequence[str] = ()) -> None:
        async def work(tx: Tx) -> None:
            for name in handlers or [PAUSE_ALL]:
                await tx.run("resume", name=name)
            await tx.wake_pool()

        await self._ctx.db.write(work)

    async def paused(self) -> Paused:
        return await self._ctx.db.read(sql_limits.paused)

    async def starts_within(self, handler: str, period: float) -> tuple[float, list[float]]:
        return await self._ctx.db.read(
            lambda tx: sql_limits.starts_within(tx, handler, period))

    async def set_max_pending(self, limit: int | None) -> None:
        async def work(tx: Tx) -> None:
            await tx.run("set_max_pending", max_pending=limit)

        await self._ctx.db.write(work)
