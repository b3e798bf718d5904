"""The PostgreSQL store's dispatch and schedule ticks.  Jobs are added by one SQL
function, poolsup.dispatch_jobs (sql/schema.sql), one statement per call: the same
statement runs on a caller's own connection, inside the caller's transaction
(`dispatch(..., connection=conn)`, postgres/caller.py).  It takes no pool-wide lock;
a dispatch tied to a producer's tick (`fired`) and a tick's own dispatch run in a
transaction that holds it, as every other write does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson
from psycopg.types.json import Jsonb

from supervisor.errors import DispatchRefused, StaleTick
from supervisor.store.postgres.db import Tx
from supervisor.store.postgres.reads import PgReads
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


def request_json(request: DispatchRequest) -> dict[str, Any]:
    """A request as poolsup.dispatch_jobs reads it (the payload as JSON text)."""
    return {"key": request.key, "handler": request.handler,
            "payload": request.payload.decode(), "max_attempts": request.max_attempts,
            "run_at": request.run_at, "schedule": request.schedule,
            "priority": request.priority, "group": request.group,
            "unique_for": request.unique_for, "traceparent": request.traceparent,
            "tracestate": request.tracestate}


def dispatch_params(pool: str, retention: float,
                    requests: Sequence[DispatchRequest]) -> dict[str, Any]:
    return {"pool": pool, "retention": retention,
            "jobs": Jsonb([request_json(request) for request in requests])}


async def admit_jobs(tx: Tx, retention: float, requests: Sequence[DispatchRequest], *,
                     limit_pending: bool = True) -> list[DispatchRefused | None]:
    """poolsup.dispatch_jobs in this transaction: None where a job was added, else why
    not (store/refusals.py).  A tick's job is not held to max_pending."""
    codes = await tx.value("dispatch_jobs", **dispatch_params(tx.pool, retention, requests),
                           limit_pending=limit_pending)
    max_pending = await tx.value("max_pending") if any_refused(codes) else None
    return refusals(requests, codes, max_pending)


def any_refused(codes: Sequence[int]) -> bool:
    return any(code != ADDED for code in codes)


def refusals(requests: Sequence[DispatchRequest], codes: Sequence[int],
             max_pending: int | None) -> list[DispatchRefused | None]:
    """Per request, None where poolsup.dispatch_jobs added it, else why not."""
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


class PgDispatch(PgReads):  # a dispatch answers the record it made
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

        if fired is None:  # one statement on its own: no pool lock, no store time needed
            db = self._ctx.db
            (row,) = await db.write_one("dispatch_jobs", limit_pending=True,
                                        **dispatch_params(self._ctx.pool, self._ctx.retention,
                                                          requests))
            codes = row["dispatch_jobs"]
            max_pending = None
            if any_refused(codes):
                rows = await db.read_one("max_pending")
                max_pending = rows[0]["max_pending"] if rows else None
            return refusals(requests, codes, max_pending)

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
