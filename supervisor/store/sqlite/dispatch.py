"""The SQLite store's schedule ticks and jobs created in bulk: the work each
transaction does, each operation a transaction of its own (a part of SqliteStore:
sqlite/context.py).

Times: `run_at` and `due` are wall-clock epoch seconds, as retry backoff is (see
sqlite/store.py): a delayed job is due when the host's wall clock reaches `run_at`,
which is what a user who asked for "at 03:00" means.  A step of the wall clock then
moves when it starts, and never starts it twice (leases stay on CLOCK_BOOTTIME).
Ticks are the caller's nominal epoch times, compared exactly (REAL keeps the double);
`not_before` is compared with the wall clock, the store's clock for users.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson

from supervisor.errors import DispatchRefused, StaleTick
from supervisor.store.records import (
    LIVE_STATES,
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
from supervisor.store.refusals import (
    ADDED,
    FINISHED_WITHIN_UNIQUE_WINDOW,
    LIVE,
    POOL_FULL,
    refusal,
)
from supervisor.store.sqlite import history
from supervisor.store.sqlite import output as sqlite_output
from supervisor.store.sqlite.db import Tx
from supervisor.store.sqlite.reads import SqliteReads

EVENT_KEEP_SECONDS = 60.0


def insert_job(tx: Tx, request: DispatchRequest, cutoff: float) -> bool:
    """Create the job unless its key is live (False then, and nothing changes)."""
    return admit_job(tx, request, cutoff, pending=None) == ADDED


def admit_job(tx: Tx, request: DispatchRequest, cutoff: float, *, pending: int | None) -> int:
    """Create the job unless its key is live, it finished within the request's unique
    window, or `pending` (None: no limit) reached the pool's max_pending; a code of
    refusals.py."""
    row = tx.row("job_finished_at", key=request.key, cutoff=cutoff)
    if row is not None and row["state"] in LIVE_STATES:
        return LIVE
    if row is not None and request.unique_for > 0 and row["finished_at"] is not None \
            and tx.now - row["finished_at"] < request.unique_for:
        return FINISHED_WITHIN_UNIQUE_WINDOW
    max_pending = tx.value("max_pending") if pending is not None else None
    if max_pending is not None and pending is not None and pending >= max_pending:
        return POOL_FULL
    history.forget(tx, request.key)
    sqlite_output.forget(tx, request.key)
    tx.run("insert_job", key=request.key, handler=request.handler, payload=request.payload,
           max_attempts=request.max_attempts, run_at=request.run_at,
           schedule=request.schedule, priority=request.priority, job_group=request.group,
           traceparent=request.traceparent, tracestate=request.tracestate)
    tx.run("drop_notes", key=request.key)
    history.note(tx, request.key, "dispatched", request.schedule)
    return ADDED


def emit_wake(tx: Tx) -> None:
    tx.run("trim_events", cutoff=tx.now - EVENT_KEEP_SECONDS)
    tx.run("emit_event", kind="wake", key=None)


def check_current(tx: Tx, fired: FiredTick | None) -> None:
    """Raise `StaleTick` unless the producer's tick `fired` is current (None: no plan)."""
    if fired is None:
        return
    row = tx.row("schedule_last_fired", name=fired.schedule)
    if row is None or (row["last_tick"], row["fired_by"], row["outcome"]) != (
            fired.tick, fired.owner, "fired"):
        raise StaleTick(f"schedule {fired.schedule}: tick {fired.tick!r} fired by "
                        f"{fired.owner} is no longer current; its plan changes nothing")


class SqliteDispatch(SqliteReads):  # a dispatch answers the record it made
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
        """Each request as `admit_job`, counting the pending jobs once; a wake if any was
        added."""
        if not requests:
            return []

        def work(tx: Tx) -> list[DispatchRefused | None]:
            check_current(tx, fired)
            cutoff = self._ctx.cutoff(tx)
            pending = tx.value("pending_count") if tx.value("max_pending") is not None else None
            refused: list[DispatchRefused | None] = []
            for request in requests:
                code = admit_job(tx, request, cutoff, pending=pending)
                if code == ADDED and pending is not None:
                    pending += 1
                refused.append(refusal(request, code, tx.value("max_pending")))
            if any(refusal is None for refusal in refused):
                emit_wake(tx)
            return refused

        return await self._ctx.db.write(work)

    async def fire_tick(self, request: TickRequest) -> TickResult:
        def work(tx: Tx) -> TickResult:
            row = tx.row("schedule_last_fired", name=request.schedule)
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
                tx.run("restart_schedule", name=request.schedule)
            outcome, detail = "fired", None
            if request.dispatch is not None:
                job = replace(request.dispatch,
                              schedule=request.dispatch.schedule or request.schedule)
                detail = orjson.dumps(job.key).decode()
                if insert_job(tx, job, self._ctx.cutoff(tx)):
                    outcome = "dispatched"
                    emit_wake(tx)
                else:
                    outcome = "skipped"
            tx.run("record_tick", name=request.schedule, tick=request.tick,
                   fingerprint=request.fingerprint, owner=request.owner, outcome=outcome,
                   detail=detail, skipped=int(outcome == "skipped"), missed=request.missed)
            return TickResult(outcome=outcome, store_time=tx.now, last_tick=request.tick)

        return await self._ctx.db.write(work)

    async def record_tick_outcome(self, fired: FiredTick, outcome: str, detail: bytes, *,
                                  end: bool = False) -> bool:
        return await self._ctx.db.write(lambda tx: tx.run(
            "record_tick_outcome", name=fired.schedule, tick=fired.tick, owner=fired.owner,
            outcome=outcome, detail=detail.decode(), end=int(end)).rowcount > 0)

    async def schedules(self) -> ScheduleBook:
        return await self._ctx.db.read(lambda tx: ScheduleBook(
            store_time=tx.now, schedules=tuple(_record(row) for row in tx.rows("all_schedules"))))

    async def live_among(self, keys: Sequence[str]) -> set[str]:
        def work(tx: Tx) -> set[str]:
            return {key for key in keys if tx.value("job_state", key=key, cutoff=0.0)
                    in LIVE_STATES}

        return await self._ctx.db.read(work)

    async def live_keys_of_schedule(self, schedule: str) -> list[str]:
        return await self._ctx.db.read(lambda tx: [
            row["key"] for row in tx.rows("live_keys_of_schedule", schedule=schedule)])


def _record(row: Any) -> ScheduleRecord:
    return ScheduleRecord(
        name=row["name"], last_tick=row["last_tick"], fingerprint=row["fingerprint"],
        fired_by=row["fired_by"], fired_at=row["fired_at"], outcome=row["outcome"],
        detail=None if row["detail"] is None else orjson.loads(row["detail"]),
        fires=row["fires"], skipped=row["skipped"], missed=row["missed"],
        ended_at=row["ended_at"], ended_tick=row["ended_tick"],
    )
