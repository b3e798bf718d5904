"""The Redis store's steering of the pool: pauses and the settings the store enforces
(RedisStore delegates here).

A pause is a field of the pool's `paused` hash (a handler, or "*" for the whole pool),
which every claim reads in the same atomic step as it hands out jobs, so no supervisor
starts a paused handler's job once `pause` returned.  A resume publishes a wake, so that
supervisors with idle slots claim at once rather than at their next poll.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from supervisor.store.records import PAUSE_ALL, Paused
from supervisor.store.redis_connection import RedisClient, translated_errors
from supervisor.store.redis_keys import PoolKeys
from supervisor.store.redis_records import milliseconds


class RedisSteering:
    def __init__(self, client: RedisClient, keys: PoolKeys, where: str) -> None:
        self._client = client
        self._keys = keys
        self._where = where

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
