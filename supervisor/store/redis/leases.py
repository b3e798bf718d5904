"""The Redis store's leases once claimed (claim.py): renewed, and ended by complete,
fail, release, snooze or finish stopped, and the checkpoint a running job saves.  Each is one
script that changes nothing unless the lease's token and owner still hold the job
(fencing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from supervisor.store.policy import HEALTH_GAP
from supervisor.store.records import (
    JobState,
    JobStats,
    Lease,
    MembershipState,
    RenewResult,
    snooze_detail,
)
from supervisor.store.redis.connection import RENEWAL_FIRST, translated_errors
from supervisor.store.redis.context import RedisPart
from supervisor.store.redis.keys import queue_id
from supervisor.store.redis.records import milliseconds, pairs, seconds
from supervisor.store.redis.scripts import ScriptArg


def _key_tokens(flat: list[bytes]) -> frozenset[tuple[str, int]]:
    """A script's {key, token, key, token, ...} answer as (key, token) pairs."""
    return frozenset((key.decode(), int(token)) for key, token in pairs(flat))


def _optional(value: float | None) -> ScriptArg:
    return "" if value is None else value


class RedisLeases(RedisPart):
    async def renew(
        self,
        owner: str,
        instance: str,
        leases: Sequence[Lease],
        lease_ttl: float,
        stats: dict[str, JobStats],
    ) -> RenewResult:
        ctx, k = self._ctx, self._ctx.keys
        keys = [k.running, k.seen, k.supervisors, k.health]
        args: list[ScriptArg] = [owner, instance, milliseconds(lease_ttl),
                                 milliseconds(HEALTH_GAP)]
        for lease in leases:
            job_stats = stats.get(lease.key, JobStats())
            keys += [k.job(lease.key), k.notes(lease.key)]
            args += [lease.key, lease.token, _optional(job_stats.pid),
                     _optional(job_stats.rss_bytes), _optional(job_stats.cpu_percent)]
        sent_at = ctx.witness.sending()
        first = RENEWAL_FIRST.set(True)
        try:
            now, lost, stopping, notified, membership = await ctx.witnessed(
                sent_at, ctx.run("renew", keys, args, subject=owner))
        finally:
            RENEWAL_FIRST.reset(first)
        ctx.witness.answered(sent_at, seconds(now), reported=False)
        return RenewResult(
            lost=_key_tokens(lost),
            stop_requested=frozenset(key.decode() for key in stopping),
            notified=frozenset(key.decode() for key in notified),
            store_time=seconds(now),
            membership=cast(MembershipState, membership.decode()),
        )

    async def complete(self, lease: Lease, result: bytes) -> None:
        await self._end_lease("complete", lease, "succeeded", [result, self._ctx.retention_ms])

    async def fail(self, lease: Lease, error: str, *, final: bool, retry_delay: float) -> JobState:
        k = self._ctx.keys
        queue = await self._queue_of(lease.key)
        (state,) = await self._ctx.run(
            "fail",
            [k.job(lease.key), k.notes(lease.key), k.pending, k.running, k.done("failed"),
             k.done("stopped"), k.queue(queue)],
            [lease.key, lease.token, lease.owner, queue, error, "1" if final else "0",
             milliseconds(retry_delay), self._ctx.retention_ms, k.channel],
            subject=lease.key,
        )
        return cast(JobState, state.decode())

    async def release(
        self,
        lease: Lease,
        *,
        delay: float = 0.0,
        reserve_for: str | None = None,
        reserve_ttl: float = 0.0,
        reason: str = "",
    ) -> None:
        k = self._ctx.keys
        queue = await self._queue_of(lease.key)
        await self._ctx.run(
            "release",
            [k.job(lease.key), k.notes(lease.key), k.pending, k.running, k.done("stopped"),
             k.queue(queue), k.reserved(reserve_for or "")],
            [lease.key, lease.token, lease.owner, queue, max(0.0, milliseconds(delay)),
             self._ctx.retention_ms, k.channel, reserve_for or "",
             max(0.0, milliseconds(reserve_ttl)), reason],
            subject=lease.key,
        )

    async def snooze(self, lease: Lease, delay: float) -> JobState:
        k = self._ctx.keys
        queue = await self._queue_of(lease.key)
        (state,) = await self._ctx.run(
            "snooze",
            [k.job(lease.key), k.notes(lease.key), k.pending, k.running, k.done("stopped"),
             k.queue(queue)],
            [lease.key, lease.token, lease.owner, queue, max(0.0, milliseconds(delay)),
             self._ctx.retention_ms, k.channel, snooze_detail(delay)],
            subject=lease.key,
        )
        return cast(JobState, state.decode())

    async def save_checkpoint(self, lease: Lease, value: bytes) -> None:
        await self._ctx.run(
            "save-checkpoint", [self._ctx.keys.job(lease.key)], [lease.token, lease.owner, value],
            subject=lease.key,
        )

    async def finish_stopped(self, lease: Lease, reason: str) -> None:
        await self._end_lease("finish-stopped", lease, "stopped", [reason, self._ctx.retention_ms])

    async def _end_lease(
        self, name: str, lease: Lease, state: str, args: Sequence[ScriptArg]
    ) -> list[Any]:
        """Run a command that ends a running job in `state` (KEYS: job, notes, running,
        done:<state>; ARGV: key, token, owner, then `args`)."""
        k = self._ctx.keys
        return await self._ctx.run(
            name,
            [k.job(lease.key), k.notes(lease.key), k.running, k.done(state)],
            [lease.key, lease.token, lease.owner, *args],
            subject=lease.key,
        )

    async def _queue_of(self, key: str) -> str:
        """The job's claim queue (handler, or handler:priority; '' for a job that is
        gone: the script then finds the lease stale before it touches a queue)."""
        with translated_errors(self._ctx.where):
            fields = cast(list[bytes | None], await self._ctx.client.hmget(
                self._ctx.keys.job(key), "handler", "priority"))
        handler, priority = fields
        if handler is None:
            return ""
        return queue_id(handler.decode(), int(priority or 0))
