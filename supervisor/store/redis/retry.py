"""The Redis store's retry: a failed or stopped job back to pending (lua/retry-6.lua)."""

from __future__ import annotations

from typing import cast

from supervisor.errors import StoreError
from supervisor.store.redis.connection import translated_errors
from supervisor.store.redis.context import RedisPart
from supervisor.store.redis.keys import queue_id
from supervisor.store.redis.scripts import KEYS_CHANGED_RETRIES, KeysChanged
from supervisor.store.retry_rules import refuse_retry

RETRIED = "retried"


class RedisRetry(RedisPart):
    async def retry(self, key: str) -> None:
        ctx, keys = self._ctx, self._ctx.keys
        for _ in range(KEYS_CHANGED_RETRIES):
            # The job's queue and schedule index are declared, so they are read first;
            # the script changes nothing if the job is no longer theirs.
            with translated_errors(ctx.where):
                fields = cast(list[bytes | None], await ctx.client.hmget(
                    keys.job(key), "handler", "schedule", "priority"))
            handler, schedule, priority = ("" if value is None else value.decode()
                                           for value in fields)
            queue = queue_id(handler, int(priority or 0))
            try:
                (outcome,) = await ctx.run(
                    "retry",
                    [keys.job(key), keys.pending, keys.done("failed"), keys.done("stopped"),
                     keys.queue(queue), keys.schedule_jobs(schedule)],
                    [key, queue, schedule, keys.channel],
                    subject=key,
                )
            except KeysChanged:
                continue
            if outcome.decode() != RETRIED:
                refuse_retry(key, outcome.decode())
            return
        raise StoreError(f"job {key!r}: its handler or schedule changed on each of "
                         f"{KEYS_CHANGED_RETRIES} tries to retry it")
