"""The Redis store's dispatch: one job, jobs made in bulk, and schedule ticks that make
jobs (a part of RedisStore: redis/context.py).

A schedule's live jobs are found through an index per schedule (`schedule-jobs:<name>`,
a zset) that dispatch adds to, rather than by scanning every live job of the pool: a
producer's `stop_others` then costs its own jobs, not the pool's backlog.  Jobs leave
the index lazily, since a job ends in many scripts that do not know its schedule:
readers check each listed job's own record (state and `schedule`), and stale entries
are dropped by lua/prune-schedule-jobs-1+n.lua, on every `live_keys_of_schedule` (the
whole index) and after every fired tick (the PRUNE_BATCH entries checked longest ago),
so the index of a schedule nobody reads stays about its live jobs plus what finished in
its last ticks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import cast

import orjson

from supervisor.errors import DispatchRefused, StoreError
from supervisor.store.records import (
    FIRING_OUTCOMES,
    LIVE_STATES,
    UNCHECKED,
    DispatchRequest,
    FiredTick,
    JobRecord,
    ScheduleBook,
    ScheduleRecord,
    TickRequest,
    TickResult,
    Unchecked,
)
from supervisor.store.redis.connection import translated_errors
from supervisor.store.redis.context import RedisPart
from supervisor.store.redis.records import decode_job, milliseconds, pairs, seconds
from supervisor.store.redis.scripts import ScriptArg
from supervisor.store.refusals import refusal

# Index entries checked after each fired tick, longest unchecked first.
PRUNE_BATCH = 500

def _ms_or_blank(value: float | None) -> ScriptArg:
    return "" if value is None else milliseconds(value)


def _basis_arg(basis: float | Unchecked | None) -> str:
    """fire-tick's ARGV 15: '' unchecked, '-' never fired, else the tick."""
    if basis is UNCHECKED:
        return ""
    return "-" if basis is None else repr(float(basis))


def guard_args(fired: FiredTick | None) -> tuple[str, str]:
    """The ARGV pair (tick, owner) by which a script checks a plan's tick ('' for none)."""
    return ("", "") if fired is None else (repr(fired.tick), fired.owner)


class RedisDispatch(RedisPart):
    async def dispatch_each(
        self, requests: Sequence[DispatchRequest], *, fired: FiredTick | None = None
    ) -> list[DispatchRefused | None]:
        return (await self._dispatched(requests, fired=fired))[0]

    async def _dispatched(
        self, requests: Sequence[DispatchRequest], *, fired: FiredTick | None = None
    ) -> tuple[list[DispatchRefused | None], list[bytes] | None]:
        """`dispatch_each`'s answer, and the job's hash (flat, as HGETALL in Lua answers
        it) when one request created its job."""
        if not requests:
            return [], None
        k = self._ctx.keys
        keys = [k.pending, *k.all_done, k.write_probe, k.schedule(fired.schedule if fired else ""),
                k.settings]
        args: list[ScriptArg] = [k.channel, *guard_args(fired)]
        for request in requests:
            keys += [k.job(request.key), k.notes(request.key),
                     k.queue(request.handler, request.priority),
                     k.schedule_jobs(request.schedule or "")]
            args += [request.key, request.handler, request.payload, request.max_attempts,
                     _ms_or_blank(request.run_at), request.schedule or "", request.priority,
                     request.group or "", milliseconds(request.unique_for),
                     request.traceparent or "", request.tracestate or ""]
        created, max_pending, record = await self._ctx.run("dispatch", keys, args,
                                                           subject=requests[0].key)
        limit = None if max_pending is None else int(max_pending)
        return [refusal(request, int(code), limit)
                for request, code in zip(requests, created, strict=True)], record or None

    async def dispatch_many(
        self, requests: Sequence[DispatchRequest], *, fired: FiredTick | None = None
    ) -> list[bool]:
        return [refused is None for refused in await self.dispatch_each(requests, fired=fired)]

    async def dispatch(self, request: DispatchRequest) -> JobRecord:
        (refused,), record = await self._dispatched([request])
        if refused is not None:
            raise refused
        if record is None:  # the script answers a created job's record
            raise StoreError(f"dispatch of {request.key!r} answered no record")
        return decode_job(dict(pairs(record)))

    async def fire_tick(self, request: TickRequest) -> TickResult:
        k = self._ctx.keys
        job = request.dispatch
        job_schedule = "" if job is None else job.schedule or request.schedule
        outcome, now, last = await self._ctx.run(
            "fire-tick",
            [k.schedule(request.schedule), k.schedules, k.write_probe, k.pending, *k.all_done,
             k.job(job.key if job else ""), k.notes(job.key if job else ""),
             k.queue(job.handler if job else ""), k.schedule_jobs(job_schedule)],
            [request.schedule, repr(request.tick), milliseconds(request.not_before),
             request.fingerprint, request.owner, request.missed, k.channel,
             *(("", "", "", 0, "", "", "") if job is None else (
                 job.key, job.handler, job.payload, job.max_attempts,
                 _ms_or_blank(job.run_at), job_schedule, orjson.dumps(job.key))),
             _basis_arg(request.basis)],
            subject=request.schedule,
        )
        result = TickResult(outcome=outcome.decode(), store_time=seconds(now),
                            last_tick=None if last is None else float(last))
        if result.outcome in FIRING_OUTCOMES:
            with contextlib.suppress(StoreError):  # tidying only; the tick has fired
                await self._prune(request.schedule, PRUNE_BATCH)
        return result

    async def record_tick_outcome(self, fired: FiredTick, outcome: str, detail: bytes, *,
                                  end: bool = False) -> bool:
        (recorded,) = await self._ctx.run(
            "record-tick-outcome", [self._ctx.keys.schedule(fired.schedule)],
            [repr(fired.tick), outcome, detail, fired.owner, "1" if end else "0"],
            subject=fired.schedule)
        return bool(recorded)

    async def schedules(self) -> ScheduleBook:
        k = self._ctx.keys
        with translated_errors(self._ctx.where):
            found_names = cast(set[bytes], await self._ctx.client.smembers(k.schedules))
        names = sorted(name.decode() for name in found_names)
        now, found = await self._ctx.run("schedules", [k.schedules, *map(k.schedule, names)],
                                         names, subject=self._ctx.keys.pool)
        records = (_decode_schedule(name.decode(), fields) for name, fields in found)
        return ScheduleBook(store_time=seconds(now),
                            schedules=tuple(sorted(records, key=lambda r: r.name)))

    async def live_among(self, keys: Sequence[str]) -> set[str]:
        with translated_errors(self._ctx.where):
            states = await self._job_fields(keys)
        return {key for key, (state, _of) in zip(keys, states, strict=True)
                if state in LIVE_STATES}

    async def live_keys_of_schedule(self, schedule: str) -> list[str]:
        k = self._ctx.keys
        with translated_errors(self._ctx.where):
            indexed = cast(list[bytes], await self._ctx.client.zrange(
                k.schedule_jobs(schedule), 0, -1))
            listed = [key.decode() for key in indexed]
            states = await self._job_fields(listed)
        live = sorted(key for key, (state, of) in zip(listed, states, strict=True)
                      if state in LIVE_STATES and of == schedule)
        if len(live) < len(listed):
            with contextlib.suppress(StoreError):  # tidying only; the answer stands
                await self._drop_stale(schedule, listed)
        return live

    async def _job_fields(self, keys: Sequence[str]) -> list[tuple[str | None, str | None]]:
        """(state, schedule) of each job, (None, None) where gone."""
        if not keys:
            return []
        async with self._ctx.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hmget(self._ctx.keys.job(key), "state", "schedule")
            answers: list[list[bytes | None]] = await pipe.execute()
        return [(None if state is None else state.decode(),
                 None if of is None else of.decode()) for state, of in answers]

    async def _prune(self, schedule: str, count: int) -> None:
        with translated_errors(self._ctx.where):
            oldest = cast(list[bytes], await self._ctx.client.zrange(
                self._ctx.keys.schedule_jobs(schedule), 0, count - 1))
        await self._drop_stale(schedule, [key.decode() for key in oldest])

    async def _drop_stale(self, schedule: str, keys: Sequence[str]) -> None:
        k = self._ctx.keys
        for start in range(0, len(keys), PRUNE_BATCH):
            chunk = keys[start:start + PRUNE_BATCH]
            await self._ctx.run("prune-schedule-jobs",
                                [k.schedule_jobs(schedule), *map(k.job, chunk)],
                                [schedule, *chunk], subject=schedule)


def _decode_schedule(name: str, flat: Sequence[bytes]) -> ScheduleRecord:
    fields = {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}

    def text(field: str) -> str | None:
        value = fields.get(field)
        return None if value is None else value.decode()

    def number(field: str) -> int:
        return int(fields.get(field, b"0"))

    last_tick, fired_at, detail = fields.get("last_tick"), fields.get("fired_at"), \
        fields.get("detail")
    ended_at, ended_tick = fields.get("ended_at"), fields.get("ended_tick")
    return ScheduleRecord(
        name=name,
        last_tick=None if last_tick is None else float(last_tick),
        fingerprint=text("fingerprint"),
        fired_by=text("fired_by"),
        fired_at=None if fired_at is None else seconds(fired_at),
        outcome=text("outcome"),
        detail=None if detail is None else orjson.loads(detail),
        fires=number("fires"),
        skipped=number("skipped"),
        missed=number("missed"),
        ended_at=None if ended_at is None else seconds(ended_at),
        ended_tick=None if ended_tick is None else float(ended_tick),
    )
