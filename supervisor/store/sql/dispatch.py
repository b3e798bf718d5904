"""The SQL stores' dispatch and schedule ticks (a part of both SQL stores: context.py).
How jobs are admitted is the engine's (Tx.admit_jobs): SQLite checks each request in
Python over plain statements (sqlite/tx.py), PostgreSQL runs one SQL function,
poolsup.dispatch_jobs (postgres/sql/schema.sql), which a PostgreSQL dispatch outside any
plan runs as one statement of its own, without the pool's lock (postgres/dispatch.py).

Times: `run_at` and `due` are wall-clock epoch seconds on SQLite, as retry backoff is
(sqlite/store.py), the server's on PostgreSQL: a delayed job is due when that clock
reaches `run_at`, which is what a user who asked for "at 03:00" means.  Ticks are the
caller's nominal epoch times, compared exactly; `not_before` is compared with the
store's clock for users (`now`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson

from supervisor.errors import DispatchRefused, StaleTick
from supervisor.store.records import (
    RELEASED,
    DispatchRequest,
    FiredTick,
    JobRecord,
    ScheduleBook,
    ScheduleRecord,
    TickRequest,
    TickResult,
    basis_moved,
)
from supervisor.store.refusals import ADDED, refusal
from supervisor.store.sql.reads import SqlReads
from supervisor.store.sql.tx import Tx


async def admit_jobs(tx: Tx, retention: float, requests: Sequence[DispatchRequest], *,
                     limit_pending: bool = True) -> list[DispatchRefused | None]:
    """Tx.admit_jobs: None where a job was added, else why not (store/refusals.py).  A
    tick's job is not held to max_pending."""
    codes = await tx.admit_jobs(requests, retention, limit_pending=limit_pending)
    max_pending = await tx.value("max_pending") if any_refused(codes) else None
    return refusals(requests, codes, max_pending)


def any_refused(codes: Sequence[int]) -> bool:
    return any(code != ADDED for code in codes)


def refusals(requests: Sequence[DispatchRequest], codes: Sequence[int],
             max_pending: int | None) -> list[DispatchRefused | None]:
    """Per request, None where it was added, else why not."""
    return [refusal(request, code, max_pending)
            for request, code in zip(requests, codes, strict=True)]


async def check_current(tx: Tx, fired: FiredTick | None) -> None:
    """Raise `StaleTick` unless the producer's tick `fired` is current (None: no plan)."""
    if fired is None:
        return
    row = await tx.row("schedule_last_fired", name=fired.schedule)
    if row is None or (row["last_tick"], row["fired_by"], row["outcome"]) != (
            fired.tick, fired.owner, "fired"):
        raise StaleTick(f"schedule {fired.schedule}: tick {fired.tick!r} fired by "
                        f"{fired.owner} is no longer current; its plan changes nothing")


class SqlDispatch(SqlReads):  # a dispatch answers the record it made
    async def dispatch(self, request: DispatchRequest) -> JobRecord:
        (refused,) = await self.dispatch_each([request])
        if refused is not None:
            raise refused
        return await self.job(request.key)

    async def dispatch_many(
        self, requests: Sequence[DispatchRequest], *, fired: FiredTick | None = None
    ) -> list[bool]:
        return [refused is None for refused in await self.dispatch_each(requests, fired=fired)]

    async def dispatch_each(
        self, requests: Sequence[DispatchRequest], *, fired: FiredTick | None = None
    ) -> list[DispatchRefused | None]:
        if not requests:
            return []

        async def work(tx: Tx) -> list[DispatchRefused | None]:
            await check_current(tx, fired)
            return await admit_jobs(tx, self._ctx.retention, requests)

        return await self._ctx.db.write(work)

    async def fire_tick(self, request: TickRequest) -> TickResult:
        async def work(tx: Tx) -> TickResult:
            row = await tx.row("schedule_last_fired", name=request.schedule)
            last_tick: float | None = None if row is None else row["last_tick"]
            ended = row is not None and row["ended_at"] is not None
            if row is not None and ended and row["fingerprint"] == request.fingerprint:
                return TickResult(outcome="ended", store_time=tx.now, last_tick=last_tick)
            if request.not_before > tx.now:
                return TickResult(outcome="early", store_time=tx.now, last_tick=last_tick)
            refire = row is not None and row["outcome"] == RELEASED and last_tick == request.tick
            if last_tick is not None and last_tick >= request.tick and not refire:
                return TickResult(outcome="taken", store_time=tx.now, last_tick=last_tick)
            if basis_moved(request, last_tick):  # `missed` was counted from an old read
                return TickResult(outcome="stale", store_time=tx.now, last_tick=last_tick)
            if ended:  # its definition changed: it starts again
                await tx.run("restart_schedule", name=request.schedule)
            outcome, detail = "fired", None
            if request.dispatch is not None:
                job = replace(request.dispatch,
                              schedule=request.dispatch.schedule or request.schedule)
                detail = orjson.dumps(job.key).decode()
                (refused,) = await admit_jobs(tx, self._ctx.retention, [job],
                                              limit_pending=False)
                outcome = "dispatched" if refused is None else "skipped"
            await tx.run("record_tick", name=request.schedule, tick=request.tick,
                         fingerprint=request.fingerprint, owner=request.owner,
                         outcome=outcome, detail=detail, skipped=int(outcome == "skipped"),
                         missed=request.missed)
            return TickResult(outcome=outcome, store_time=tx.now, last_tick=request.tick)

        return await self._ctx.db.write(work)

    async def record_tick_outcome(self, fired: FiredTick, outcome: str, detail: bytes, *,
                                  end: bool = False) -> bool:
        async def work(tx: Tx) -> bool:
            done = await tx.row("record_tick_outcome", name=fired.schedule, tick=fired.tick,
                                owner=fired.owner, outcome=outcome, detail=detail.decode(),
                                end=end)
            return done is not None

        return await self._ctx.db.write(work)

    async def schedules(self) -> ScheduleBook:
        async def work(tx: Tx) -> ScheduleBook:
            rows = await tx.rows("all_schedules")
            return ScheduleBook(store_time=tx.now, schedules=tuple(_record(row) for row in rows))

        return await self._ctx.db.read(work)

    async def live_among(self, keys: Sequence[str]) -> set[str]:
        async def work(tx: Tx) -> set[str]:
            return {row["key"] for row in await tx.rows("live_among", keys=list(keys))}

        return await self._ctx.db.read(work)

    async def live_keys_of_schedule(self, schedule: str) -> list[str]:
        async def work(tx: Tx) -> list[str]:
            return [row["key"] for row in await tx.rows("live_keys_of_schedule",
                                                         schedule=schedule)]

        return await self._ctx.db.read(work)


def _record(row: Any) -> ScheduleRecord:
    return ScheduleRecord(
        name=row["name"], last_tick=row["last_tick"], fingerprint=row["fingerprint"],
        fired_by=row["fired_by"], fired_at=row["fired_at"], outcome=row["outcome"],
        detail=None if row["detail"] is None else orjson.loads(row["detail"]),
        fires=row["fires"], skipped=row["skipped"], missed=row["missed"],
        ended_at=row["ended_at"], ended_tick=row["ended_tick"],
    )
