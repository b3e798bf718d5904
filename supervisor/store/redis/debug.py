"""The Redis store's side of `poolsup debug KEY`: a request published on the doorbell of
the job's holder (`d:<request>:<key>`), which the supervisor that runs the job answers
by writing its answer under `stacks:<request>` (kept a minute) and publishing on a
channel of the same name.  The asker subscribes first and reads second, so an answer
written in between is read, not missed (as `wait` does)."""

from __future__ import annotations

import uuid
from typing import cast

import anyio

from supervisor.store.redis.connection import RedisClient, translated_errors
from supervisor.store.redis.events import ended_hint, open_feed
from supervisor.store.redis.keys import PoolKeys

ANSWER_KEPT_MS = 60_000


class RedisDebug:
    def __init__(self, client: RedisClient, keys: PoolKeys, where: str) -> None:
        self._client = client
        self._keys = keys
        self._where = where

    async def request_stacks(self, key: str) -> str:
        request = uuid.uuid4().hex
        with translated_errors(self._where):
            holder = cast(bytes | None, await self._client.hget(self._keys.job(key), "owner"))
            if holder is not None:
                await self._client.publish(self._keys.doorbell(holder.decode()),
                                           f"d:{request}:{key}")
        return request

    async def answer_stacks(self, request: str, answer: bytes) -> None:
        name = self._keys.stacks_answer(request)
        with translated_errors(self._where):
            await self._client.set(name, answer, px=ANSWER_KEPT_MS)
            await self._client.publish(name, "a")

    async def stacks_answer(self, request: str, timeout: float) -> bytes | None:
        name = self._keys.stacks_answer(request)
        async with open_feed(self._client, name, where=self._where, parse=ended_hint) as hints:
            with anyio.move_on_after(timeout):
                while True:
                    with translated_errors(self._where):
                        answer = cast(bytes | None, await self._client.get(name))
                    if answer is not None:
                        return answer
                    await anext(hints)
        return None
