"""The PostgreSQL store's side of `poolsup debug KEY`: the request goes to the channel of
the supervisor that runs the job (`d REQUEST KEY`); its answer is a row of
`stacks_answers`, kept a minute, which the asker polls for."""

from __future__ import annotations

import uuid

import anyio

from supervisor.store.postgres import events
from supervisor.store.postgres.context import PgPart
from supervisor.store.postgres.db import Tx

ANSWER_KEPT = 60.0
ANSWER_POLL = 0.2


class PgDebug(PgPart):
    async def request_stacks(self, key: str) -> str:
        request = uuid.uuid4().hex

        async def work(tx: Tx) -> None:
            await events.to_holder(tx, await tx.value("job_holder", key=key), "d", request, key)

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
