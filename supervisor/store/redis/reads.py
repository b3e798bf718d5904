"""The Redis store's reads: a job, jobs by state, the members, the counts and the pool's
snapshot for `status` (a part of RedisStore: redis/context.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import cast

import orjson

from supervisor.core.failover import FAILOVER_MARGIN
from supervisor.core.validation import MAX_PRIORITY
from supervisor.errors import JobNotFound, StoreError
from supervisor.store.members import live_members
from supervisor.store.paging import checked_finished, checked_limit
from supervisor.store.policy import HEALTH_GAP, MEMBER_GARBAGE_AFTER
from supervisor.store.records import (
    JobRecord,
    JobState,
    JobStats,
    Membership,
    Paused,
    PoolSnapshot,
    StoreHealth,
)
from supervisor.store.redis.connection import translated_errors
from supervisor.store.redis.context import RedisPart
from supervisor.store.redis.pages import page_keys
from supervisor.store.redis.records import decode_job, milliseconds, pairs, seconds

# What `snapshot` reads of each running job: all but the payload, result, error and
# history, which `status` does not show (most of a job hash's bytes, and most of the
# time to read thousands of them).
RUNNING_FIELDS = ("key", "handler", "state", "owner", "token", "attempts", "max_attempts",
                  "created_at", "started_at", "finished_at", "lease_deadline", "lease_losses",
                  "stop_requested", "pid", "rss_bytes", "cpu_percent", "checkpoint",
                  "checkpoint_at", "run_at", "schedule", "priority", "group")
# Job hashes per call of lua/job-fields-0+n.lua: each call holds Redis about 2 ms.
FIELDS_BATCH = 256
PRIORITIES = range(MAX_PRIORITY + 1)  # a handler has a claim queue per priority


class RedisReads(RedisPart):
    async def job(self, key: str) -> JobRecord:
        with translated_errors(self._ctx.where):
            raw = await self._ctx.client.hgetall(self._ctx.keys.job(key))
        if not raw:
            raise JobNotFound(f"no live or retained job has the key {key!r}")
        return decode_job(cast(dict[bytes, bytes], raw))

    async def jobs(self, state: JobState | None = None) -> list[JobRecord]:
        sets = self._ctx.keys.by_state
        wanted = [sets[state]] if state else list(sets.values())
        with translated_errors(self._ctx.where):
            async with self._ctx.client.pipeline(transaction=False) as pipe:
                for name in wanted:
                    pipe.zrange(name, 0, -1)
                listed: list[list[bytes]] = await pipe.execute()
        keys = list(dict.fromkeys(key.decode() for names in listed for key in names))
        records = await self._records(keys)
        found = [record for record in records if record is not None]
        return sorted(
            (record for record in found if state is None or record.state == state),
            key=lambda record: record.created_at,
        )

    async def jobs_page(self, state: JobState | None = None, *, prefix: str = "",
                        after: str = "", limit: int = 50) -> list[JobRecord]:
        limit = checked_limit(limit)
        sets = self._ctx.keys.by_state
        wanted = [sets[state]] if state else list(sets.values())
        page = await page_keys(self._ctx.client, wanted, prefix=prefix, after=after, limit=limit,
                               where=self._ctx.where)
        records = await self._records(page, history=False)
        return [record for record in records
                if record is not None and (state is None or record.state == state)]

    async def latest_finished(self, state: JobState, limit: int = 20) -> list[JobRecord]:
        checked_finished(state)
        limit = checked_limit(limit)
        with translated_errors(self._ctx.where):  # the top of a done set, scored by end time
            newest = await self._ctx.client.zrevrange(self._ctx.keys.done(state), 0, limit - 1)
        records = await self._records([cast(bytes, key).decode() for key in newest],
                                      history=False)
        return [record for record in records if record is not None and record.state == state]

    async def members(self) -> Membership:
        k = self._ctx.keys
        now, entries, seen, running, inbound = await self._ctx.run(
            "members", [k.supervisors, k.seen, k.running], [k.prefix], subject=self._ctx.pool
        )
        store_time = seconds(now)
        last_seen = {member: seconds(score) for member, score in pairs(seen)}
        load: dict[str, dict[str, int]] = {}
        for owner, handler, count in zip(running[0::3], running[1::3], running[2::3],
                                         strict=True):
            load.setdefault(owner.decode(), {})[handler.decode()] = int(count)
        members = live_members(
            ((info, store_time - last_seen.get(member, float("-inf")))
             for member, info in pairs(entries)),
            load,
            {member.decode(): int(count) for member, count in pairs(inbound)},
        )
        return Membership(store_time=store_time, members=members)

    async def counts(self) -> dict[str, int]:
        k = self._ctx.keys
        sizes = await self._ctx.run("counts", list(k.by_state.values()), [self._ctx.retention_ms],
                                    subject=self._ctx.pool)
        return {state: int(size) for state, size in zip(k.by_state, sizes, strict=True)}

    async def pending_by_handler(self, handlers: Sequence[str]) -> dict[str, int]:
        k = self._ctx.keys
        with translated_errors(self._ctx.where):
            async with self._ctx.client.pipeline(transaction=False) as pipe:
                for handler in handlers:
                    for priority in PRIORITIES:
                        pipe.zcard(k.queue(handler, priority))
                sizes = await pipe.execute()
        per = len(PRIORITIES)
        return {handler: sum(int(size) for size in sizes[i * per:(i + 1) * per])
                for i, handler in enumerate(handlers)}

    async def snapshot(self) -> PoolSnapshot:
        k = self._ctx.keys
        error = None
        try:
            await self._ctx.run(
                "tidy", [*k.all_done, k.supervisors, k.seen, k.health],
                [self._ctx.retention_ms, milliseconds(HEALTH_GAP),
                 milliseconds(MEMBER_GARBAGE_AFTER)],
                subject=self._ctx.pool,
            )
        except StoreError as exc:
            error = exc.message
        membership = await self.members()
        now = membership.store_time
        counts = await self.counts()
        with translated_errors(self._ctx.where):
            async with self._ctx.client.pipeline(transaction=False) as pipe:
                pipe.hmget(k.health, "last_ok", "ok_since")
                pipe.zrange(k.running, 0, -1)
                # A live reservation scores later than now, as do retries held back.
                pipe.zrangebyscore(k.pending, f"({milliseconds(now):.3f}", "+inf")
                pipe.hkeys(k.paused)
                pipe.hmget(k.epoch, "seen_at", "max_ttl")
                health, running_keys, later_keys, paused, epoch = await pipe.execute()
            master = await self._ctx.master_address()
        records = await self._running_records([key.decode() for key in running_keys])
        running = tuple(r for r in records if r is not None and r.state == "running")
        last_ok, ok_since = (None if value is None else seconds(value) for value in health)
        seen_at, max_ttl = (None if value is None else seconds(value) for value in epoch)
        # core/failover.py Epoch.hold_until, while it lasts.
        hold = None if seen_at is None or max_ttl is None else seen_at + max_ttl + FAILOVER_MARGIN
        hold_until = hold if hold is not None and hold > now else None
        if error is None:
            store = StoreHealth(state="ok", since=ok_since or now, master=master,
                                hold_until=hold_until)
        else:
            store = StoreHealth(state="failing", since=last_ok or now, error=error,
                                master=master, hold_until=hold_until)
        return PoolSnapshot(
            pool=self._ctx.pool,
            store_time=now,
            supervisors=membership.members,
            counts=counts,
            running=running,
            store=store,
            moving=await self._moving([key.decode() for key in later_keys], now),
            paused=Paused.of(name.decode() for name in paused),
        )

    async def _running_records(self, keys: Sequence[str]) -> list[JobRecord | None]:
        """The records of `keys` (None where gone) with only RUNNING_FIELDS: no payload,
        result, error or events.  Read in batches by one script call each;
        done entries whose record is gone are forgotten, as in `_records`."""
        rows: list[list[bytes | None]] = []
        for start in range(0, len(keys), FIELDS_BATCH):
            batch = keys[start:start + FIELDS_BATCH]
            rows += await self._ctx.run("job-fields", [self._ctx.keys.job(key) for key in batch],
                                        RUNNING_FIELDS, subject=self._ctx.pool)
        missing = [key for key, row in zip(keys, rows, strict=True) if row[0] is None]
        if missing:
            await self._forget(missing)
        return [None if row[0] is None else _running_record(row) for row in rows]

    async def _forget(self, missing: Sequence[str]) -> None:
        with contextlib.suppress(StoreError):  # tidying only; reads go on without it
            k = self._ctx.keys
            await self._ctx.run("forget", [*k.all_done, *map(k.job, missing)],
                                [self._ctx.retention_ms, *missing], subject=self._ctx.pool)

    async def _records(self, keys: Sequence[str], *,
                       history: bool = True) -> list[JobRecord | None]:
        """The records of `keys` (None where gone), without their events unless
        `history`; done entries whose record is gone are forgotten."""
        if not keys:
            return []
        with translated_errors(self._ctx.where):
            async with self._ctx.client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hgetall(self._ctx.keys.job(key))
                raws: list[dict[bytes, bytes]] = await pipe.execute()
        missing = [key for key, raw in zip(keys, raws, strict=True) if not raw]
        if missing:
            await self._forget(missing)
        return [decode_job(raw, history=history) if raw else None for raw in raws]

    async def _moving(self, later: Sequence[str], now: float) -> tuple[JobRecord, ...]:
        """The records of the pending jobs among `later` whose reservation has not run
        out, oldest first.  Their reservation ends are read first, so that jobs held
        back by a retry delay cost one small answer each."""
        if not later:
            return ()
        with translated_errors(self._ctx.where):
            async with self._ctx.client.pipeline(transaction=False) as pipe:
                for key in later:
                    pipe.hget(self._ctx.keys.job(key), "reserved_until")
                ends: list[bytes | None] = await pipe.execute()
        reserved = [key for key, end in zip(later, ends, strict=True)
                    if end is not None and seconds(end) > now]
        records = await self._records(reserved, history=False)
        moving = [r for r in records if r is not None and r.state == "pending"
                  and r.reserved_until is not None and r.reserved_until > now]
        return tuple(sorted(moving, key=lambda record: record.created_at))


def _running_record(row: Sequence[bytes | None]) -> JobRecord:
    """A JobRecord from the values of RUNNING_FIELDS, in that order (as decode_job reads
    them, but by position: thousands of these make up most of `status`'s decoding)."""
    (key, handler, state, owner, token, attempts, max_attempts, created_at, started_at,
     finished_at, lease_deadline, lease_losses, stop_requested, pid, rss, cpu, checkpoint,
     checkpoint_at, run_at, schedule, priority, group) = row

    def time(value: bytes | None) -> float | None:
        return None if value is None else float(value) / 1000.0

    def text(value: bytes | None) -> str | None:
        return None if value is None else value.decode()

    assert key is not None and handler is not None and state is not None
    return JobRecord(
        key=key.decode(), handler=handler.decode(), state=cast(JobState, state.decode()),
        attempts=int(attempts or 0), max_attempts=int(max_attempts or 0),
        token=int(token or 0), supervisor=text(owner), payload=None, result=None,
        error=None, created_at=seconds(created_at or b"0"), started_at=time(started_at),
        finished_at=time(finished_at), lease_deadline=time(lease_deadline),
        lease_losses=int(lease_losses or 0), stop_requested=stop_requested == b"1",
        stats=JobStats(pid=None if pid is None else int(pid),
                       rss_bytes=None if rss is None else int(rss),
                       cpu_percent=None if cpu is None else float(cpu)),
        checkpoint=None if checkpoint is None else orjson.loads(checkpoint),
        checkpoint_at=time(checkpoint_at), run_at=time(run_at), schedule=text(schedule),
        priority=int(priority or 0), group=text(group),
    )
