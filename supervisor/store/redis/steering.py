"""The Redis store's steering of the pool: stops, pauses and the settings the store
enforces (a part of RedisStore: redis/context.py).

A pause is a field of the pool's `paused` hash (a handler, or "*" for the whole pool),
which every claim reads in the same atomic step as it hands out jobs, so no supervisor
starts a paused handler's job once `pause` returned.  A resume publishes a wake, so that
supervisors with idle slots claim at once rather than at their next poll.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from supervisor.errors import StoreError
from supervisor.store.records import PAUSE_ALL, FiredTick, JobState, Paused
from supervisor.store.redis.connection import translated_errors
from supervisor.store.redis.context import RedisPart
from supervisor.store.redis.dispatch import guard_args
from supervisor.store.redis.keys import queue_id
from supervisor.store.redis.records import milliseconds
from supervisor.store.redis.scripts import KEYS_CHANGED_RETRIES, KeysChanged


class RedisSteering(RedisPart):
    async def stop(self, key: str, *, fired: FiredTick | None = None) -> JobState:
        k = self._ctx.keys
        for _ in range(KEYS_CHANGED_RETRIES):
            # A pending job leaves its queue and reservation: their names are declared,
            # so they are read first, and the script changes nothing if they moved on.
            with translated_errors(self._ctx.where):
                fields = cast(list[bytes | None], await self._ctx.client.hmget(
                    k.job(key), "handler", "reserved_for", "priority"))
            handler, reserved_for, priority = ("" if value is None else value.decode()
                                               for value in fields)
            queue = queue_id(handler, int(priority or 0))
            try:
                (state,) = await self._ctx.run(
                    "stop",
                    [k.job(key), k.notes(key), k.pending, k.running, k.done("stopped"),
                     k.queue(queue), k.reserved(reserved_for),
                     k.schedule(fired.schedule if fired else "")],
                    [key, self._ctx.retention_ms, k.channel, queue, reserved_for,
                     *guard_args(fired)],
                    subject=key,
                )
            except KeysChanged:
                continue
            return cast(JobState, state.decode())
        raise StoreError(f"job {key!r}: its claim queue or reservation changed on each of "
                         f"{KEYS_CHANGED_RETRIES} tries to stop it")

    async def pause(self, handlers: Sequence[str] = ()) -> None:
        names = list(handlers) or [PAUSE_ALL]
        with translated_errors(self._ctx.where):
            (seconds, micros) = await self._ctx.client.time()
            now = milliseconds(seconds + micros / 1e6)
            await self._ctx.client.hset(self._ctx.keys.paused, mapping=dict.fromkeys(names, now))

    async def resume(self, handlers: Sequence[str] = ()) -> None:
        names = list(handlers) or [PAUSE_ALL]
        with translated_errors(self._ctx.where):
            await self._ctx.client.hdel(self._ctx.keys.paused, *names)
            await self._ctx.client.publish(self._ctx.keys.channel, "w")

    async def paused(self) -> Paused:
        with translated_errors(self._ctx.where):
            names = cast(list[bytes], await self._ctx.client.hkeys(self._ctx.keys.paused))
        return Paused.of(name.decode() for name in names)

    async def starts_within(self, handler: str, period: float) -> tuple[float, list[float]]:
        with translated_errors(self._ctx.where):
            (seconds_now, micros) = await self._ctx.client.time()
            now = seconds_now + micros / 1e6
            found = cast(list[tuple[bytes, float]], await self._ctx.client.zrangebyscore(
                self._ctx.keys.starts(handler), f"({milliseconds(now - period):.3f}", "+inf",
                withscores=True))
        return now, [float(score) / 1000 for _member, score in found]

    async def set_max_pending(self, limit: int | None) -> None:
        with translated_errors(self._ctx.where):
            if limit is None:
                await self._ctx.client.hdel(self._ctx.keys.settings, "max_pending")
            else:
                await self._ctx.client.hset(self._ctx.keys.settings, "max_pending", limit)
