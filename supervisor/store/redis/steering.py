"""The Redis store's steering of the pool: stops, pauses and the settings the store
enforces (RedisStore delegates here).

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
from supervisor.store.redis.connection import RedisClient, translated_errors
from supervisor.store.redis.dispatch import RunScript, guard_args
from supervisor.store.redis.keys import PoolKeys, queue_id
from supervisor.store.redis.records import milliseconds
from supervisor.store.redis.scripts import KEYS_CHANGED_RETRIES, KeysChanged


class RedisSteering:
    def __init__(self, client: RedisClient, keys: PoolKeys, run: RunScript, where: str, *,
                 retention_ms: int) -> None:
        self._client = client
        self._keys = keys
        self._run = run
        self._where = where
        self._retention_ms = retention_ms

    async def stop(self, key: str, *, fired: FiredTick | None = None) -> JobState:
        k = self._keys
        for _ in range(KEYS_CHANGED_RETRIES):
            # A pending job leaves its queue and reservation: their names are declared,
            # so they are read first, and the script changes nothing if they moved on.
            with translated_errors(self._where):
                fields = cast(list[bytes | None], await self._client.hmget(
                    k.job(key), "handler", "reserved_for", "priority"))
            handler, reserved_for, priority = ("" if value is None else value.decode()
                                               for value in fields)
            queue = queue_id(handler, int(priority or 0))
            try:
                (state,) = await self._run(
                    "stop",
                    [k.job(key), k.notes(key), k.pending, k.running, k.done("stopped"),
                     k.queue(queue), k.reserved(reserved_for),
                     k.schedule(fired.schedule if fired else "")],
                    [key, self._retention_ms, k.channel, queue, reserved_for,
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
        with translated_errors(self._where):
            (seconds, micros) = await self._client.time()
            now = milliseconds(seconds + micros / 1e6)
            await self._client.hset(self._keys.paused, mapping=dict.fromkeys(names, now))

    async def resume(self, handlers: Sequence[str] = ()) -> None:
        names = list(handlers) or [PAUSE_ALL]
        with translated_errors(self._where):
            await self._client.hdel(self._keys.paused, *names)
            await self._client.publish(self._keys.channel, "w")

    async def paused(self) -> Paused:
        with translated_errors(self._where):
            names = cast(list[bytes], await self._client.hkeys(self._keys.paused))
        return Paused.of(name.decode() for name in names)

    async def starts_within(self, handler: str, period: float) -> tuple[float, list[float]]:
        with translated_errors(self._where):
            (seconds_now, micros) = await self._client.time()
            now = seconds_now + micros / 1e6
            found = cast(list[tuple[bytes, float]], await self._client.zrangebyscore(
                self._keys.starts(handler), f"({milliseconds(now - period):.3f}", "+inf",
                withscores=True))
        return now, [float(score) / 1000 for _member, score in found]

    async def set_max_pending(self, limit: int | None) -> None:
        with translated_errors(self._where):
            if limit is None:
                await self._client.hdel(self._keys.settings, "max_pending")
            else:
                await self._client.hset(self._keys.settings, "max_pending", limit)
