"""The SQLite store's steering of the pool: stops, pauses and the settings the store
enforces (a part of SqliteStore: sqlite/context.py).  A pause is a row of `paused` (a
handler, or "*" for the whole pool), which every claim reads in its transaction
(limits.py `served`); a resume wakes the pool's supervisors."""

from __future__ import annotations

from collections.abc import Sequence

from supervisor.errors import JobNotFound
from supervisor.store.records import LIVE_STATES, PAUSE_ALL, FiredTick, JobState, Paused
from supervisor.store.sqlite import dispatch as sqlite_dispatch
from supervisor.store.sqlite import history, leases
from supervisor.store.sqlite import limits as sqlite_limits
from supervisor.store.sqlite.context import SqlitePart
from supervisor.store.sqlite.db import Tx


class SqliteSteering(SqlitePart):
    async def stop(self, key: str, *, fired: FiredTick | None = None) -> JobState:
        def work(tx: Tx) -> JobState:
            sqlite_dispatch.check_current(tx, fired)
            state: JobState | None = tx.value("job_state", key=key,
                                              cutoff=self._ctx.cutoff(tx))
            if state is None:
                raise JobNotFound(f"no job has the key {key!r}")
            if state not in LIVE_STATES:
                return state
            if state == "running" and not tx.value("stop_requested", key=key):
                history.note(tx, key, "stopping", "stop")
            tx.run("request_stop", key=key)
            leases.emit(tx, "stop", key)
            if state == "pending":
                return leases.finish(tx, key, "stopped", "stopped while pending")
            return state

        return await self._ctx.db.write(work)

    async def pause(self, handlers: Sequence[str] = ()) -> None:
        def work(tx: Tx) -> None:
            for name in handlers or [PAUSE_ALL]:
                tx.run("pause", name=name)

        await self._ctx.db.write(work)

    async def resume(self, handlers: Sequence[str] = ()) -> None:
        def work(tx: Tx) -> None:
            for name in handlers or [PAUSE_ALL]:
                tx.run("resume", name=name)
            sqlite_dispatch.emit_wake(tx)

        await self._ctx.db.write(work)

    async def paused(self) -> Paused:
        return await self._ctx.db.read(sqlite_limits.paused)

    async def starts_within(self, handler: str, period: float) -> tuple[float, list[float]]:
        return await self._ctx.db.read(
            lambda tx: sqlite_limits.starts_within(tx, handler, period))

    async def set_max_pending(self, limit: int | None) -> None:
        await self._ctx.db.write(lambda tx: tx.run("set_max_pending", max_pending=limit))
