"""The Redis store's side of `poolsup debug KEY`: a request published on the doorbell of
the job's holder (`d:<request>:<key>`), which the supervisor that runs the job answers
by writing its answer under `stacks:<request>` (kept a minute) and publishing on a
channel of the same name.  The asker subscribes first and reads second, so an answer
written in between is read, not missed (as `wait` does)."""

from __future__ import annotations

import uuid
from typing import cast

import anyio

from supervisor.store.redis.connection import translated_errors
from supervisor.store.redis.context import RedisPart
from supervisor.store.redis.events import ended_hint, open_feed

ANSWER_KEPT_MS = 60_000


class RedisDebug(RedisPart):
    async def request_stacks(self, key: str) -> str:
        request = uuid.uuid4().hex
        ctx = self._ctx
        with translated_errors(ctx.where):
            holder = cast(bytes | None, await ctx.client.hget(ctx.keys.job(key), "owner"))
            if holder is not None:
                await ctx.client.publish(ctx.keys.doorbell(holder.decode()),
                                         f"d:{request}:{key}")
        return request

    async def answer_stacks(self, request: str, answer: bytes) -> None:
        name = self._ctx.keys.stacks_answer(request)
        with translated_errors(self._ctx.where):
            await self._ctx.client.set(name, answer, px=ANSWER_KEPT_MS)
            await self._ctx.client.publish(name, "a")

    async def stacks_answer(self, request: str, timeout: float) -> bytes | None:
        ctx = self._ctx
        name = ctx.keys.stacks_answer(request)
        async with open_feed(ctx.client, name, where=ctx.where, parse=ended_hint) as hints:
            with anyio.move_on_after(timeout):
                while True:
                    with translated_errors(ctx.where):
                        answer = cast(bytes | None, await ctx.client.get(name))
                    if answer is not None:
                        return answer
                    await anext(hints)
        return None
