"""The SQLite store's side of `poolsup debug KEY`: the request is an event (`debug`,
keyed "<request>:<job key>") that the supervisor running the job sees in its next poll;
its answer is a row of `stacks_answers`, kept a minute, which the asker polls for."""

from __future__ import annotations

import uuid

import anyio

from supervisor.store.sqlite.context import SqlitePart
from supervisor.store.sqlite.db import Tx

ANSWER_KEPT = 60.0
ANSWER_POLL = 0.2


class SqliteDebug(SqlitePart):
    async def request_stacks(self, key: str) -> str:
        request = uuid.uuid4().hex
        await self._ctx.db.write(
            lambda tx: tx.run("emit_event", kind="debug", key=f"{request}:{key}"))
        return request

    async def answer_stacks(self, request: str, answer: bytes) -> None:
        def work(tx: Tx) -> None:
            tx.run("forget_stacks_answers", cutoff=tx.now - ANSWER_KEPT)
            tx.run("answer_stacks", request=request, answer=answer)

        await self._ctx.db.write(work)

    async def stacks_answer(self, request: str, timeout: float) -> bytes | None:
        with anyio.move_on_after(timeout):
            while True:
                answer = await self._ctx.db.read(
                    lambda tx: tx.value("stacks_answer", request=request))
                if answer is not None:
                    return bytes(answer)
                await anyio.sleep(ANSWER_POLL)
        return None
