"""The PostgreSQL store's retry: a failed or stopped job back to pending, waking one
supervisor waiting for its handler."""

from __future__ import annotations

from supervisor.errors import JobNotFound
from supervisor.store.postgres import events, history
from supervisor.store.postgres import output as pg_output
from supervisor.store.postgres.context import PgPart
from supervisor.store.postgres.db import Tx
from supervisor.store.retry_rules import refuse_retry


class PgRetry(PgPart):
    async def retry(self, key: str) -> None:
        async def work(tx: Tx) -> None:
            state = await tx.value("job_state", key=key, cutoff=self._ctx.cutoff(tx))
            if state is None:
                raise JobNotFound(f"no job has the key {key!r}")
            refuse_retry(key, state)
            handler = await tx.value("retry_job", key=key)
            await pg_output.forget(tx, key)
            await history.note(tx, key, "retried")
            await events.wake_one(tx, handler)

        await self._ctx.db.write(work)
