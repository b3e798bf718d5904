"""The SQL stores' side of `poolsup debug KEY`: the request is told to the supervisor
that runs the job (Tx.tell_holder: SQLite's `debug` event, which that supervisor sees
in its next poll; PostgreSQL's NOTIFY to its channel); its answer is a row of
`stacks_answers`, kept a minute, which the asker polls for."""

from __future__ import annotations

import uuid

import anyio

from supervisor.store.sql.context import SqlPart
from supervisor.store.sql.tx import Tx

ANSWER_KEPT = 60.0
ANSWER_POLL = 0.2


class SqlDebug(SqlPart):
    async def request_stacks(self, key: str) -> str:
        request = uuid.uuid4().hex

        async def work(tx: Tx) -> None:
            await tx.tell_holder(key, "debug", request)

        await self._ctx.db.write(work, pool_lock=False)
        return request

    async def answer_stacks(self, request: str, answer: bytes) -> None:
        async def work(tx: Tx) -> None:
            await tx.run("forget_stacks_answers", cutoff=tx.now - ANSWER_KEPT)
            await tx.run("answer_stacks", request=request, answer=answer)

        await self._ctx.db.write(work, pool_lock=False)

    async def stacks_answer(self, request: str, timeout: float) -> bytes | None:
        async def work(tx: Tx) -> bytes | None:
            answer = await tx.value("stacks_answer", request=request)
            return None if answer is None else bytes(answer)

        with anyio.move_on_after(timeout):
            while True:
                if (answer := await self._ctx.db.read(work)) is not None:
                    return answer
                await anyio.sleep(ANSWER_POLL)
        return None
