"""The Redis store's ends of a lease: complete, fail, release, finish stopped, and the
checkpoint a running job saves (RedisStore delegates here).  Each is one script that
changes nothing unless the lease's token and owner still hold the job (fencing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from supervisor.store.records import JobState, Lease
from supervisor.store.redis.connection import RedisClient, translated_errors
from supervisor.store.redis.dispatch import RunScript
from supervisor.store.redis.keys import PoolKeys, queue_id
from supervisor.store.redis.records import milliseconds
from supervisor.store.redis.scripts import ScriptArg


class RedisLeaseEnds:
    def __init__(self, client: RedisClient, keys: PoolKeys, run: RunScript, where: str, *,
                 retention_ms: int) -> None:
        self._client = client
        self._keys = keys
        self._run = run
        self._where = where
        self._retention_ms = retention_ms

    async def complete(self, lease: Lease, result: bytes) -> None:
        await self._end_lease("complete", lease, "succeeded", [result, self._retention_ms])

    async def fail(self, lease: Lease, error: str, *, final: bool, retry_delay: float) -> JobState:
        k = self._keys
        queue = await self._queue_of(lease.key)
        (state,) = await self._run(
            "fail",
            [k.job(lease.key), k.notes(lease.key), k.pending, k.running, k.done("failed"),
             k.done("stopped"), k.queue(queue)],
            [lease.key, lease.token, lease.owner, queue, error, "1" if final else "0",
             milliseconds(retry_delay), self._retention_ms, k.channel],
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
        k = self._keys
        queue = await self._queue_of(lease.key)
        await self._run(
            "release",
            [k.job(lease.key), k.notes(lease.key), k.pending, k.running, k.done("stopped"),
             k.queue(queue), k.reserved(reserve_for or "")],
            [lease.key, lease.token, lease.owner, queue, max(0.0, milliseconds(delay)),
             self._retention_ms, k.channel, reserve_for or "",
             max(0.0, milliseconds(reserve_ttl)), reason],
            subject=lease.key,
        )

    async def save_checkpoint(self, lease: Lease, value: bytes) -> None:
        await self._run(
            "save-checkpoint", [self._keys.job(lease.key)], [lease.token, lease.owner, value],
            subject=lease.key,
        )

    async def finish_stopped(self, lease: Lease, reason: str) -> None:
        await self._end_lease("finish-stopped", lease, "stopped", [reason, self._retention_ms])

    async def _end_lease(
        self, name: str, lease: Lease, state: str, args: Sequence[ScriptArg]
    ) -> list[Any]:
        """Run a command that ends a running job in `state` (KEYS: job, notes, running,
        done:<state>; ARGV: key, token, owner, then `args`)."""
        k = self._keys
        return await self._run(
            name,
            [k.job(lease.key), k.notes(lease.key), k.running, k.done(state)],
            [lease.key, lease.token, lease.owner, *args],
            subject=lease.key,
        )

    async def _queue_of(self, key: str) -> str:
        """The job's claim queue (handler, or handler:priority; '' for a job that is
        gone: the script then finds the lease stale before it touches a queue)."""
        with translated_errors(self._where):
            fields = cast(list[bytes | None], await self._client.hmget(
                self._keys.job(key), "handler", "priority"))
        handler, priority = fields
        if handler is None:
            return ""
        return queue_id(handler.decode(), int(priority or 0))
