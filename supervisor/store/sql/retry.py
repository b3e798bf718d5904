"""The SQL stores' retry: a failed or stopped job back to pending, waking a supervisor
that waits for its handler."""

from __future__ import annotations

from supervisor.errors import JobNotFound
from supervisor.store.retry_rules import refuse_retry
from supervisor.store.sql import history
from supervisor.store.sql import output as sql_output
from supervisor.store.sql.context import SqlPart
from supervisor.store.sql.tx import Tx


class SqlRetry(SqlPart):
    async def retry(self, key: str) -> None:
        async def work(tx: Tx) -> None:
            state = await tx.value("job_state", key=key, cutoff=self._ctx.cutoff(tx))
            if state is None:
                raise JobNotFound(f"no job has the key {key!r}")
            refuse_retry(key, state)
            handler = await tx.value("retry_job", key=key)
            await sql_output.forget(tx, key)
            await history.note(tx, key, "retried")
            await tx.requeued(handler, due_now=True)

        await self._ctx.db.write(work)
