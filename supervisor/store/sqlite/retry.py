"""The SQLite store's retry: a failed or stopped job back to pending."""

from __future__ import annotations

from supervisor.errors import JobNotFound
from supervisor.store.retry_rules import refuse_retry
from supervisor.store.sqlite import history
from supervisor.store.sqlite import output as sqlite_output
from supervisor.store.sqlite.context import SqlitePart
from supervisor.store.sqlite.db import Tx


class SqliteRetry(SqlitePart):
    async def retry(self, key: str) -> None:
        def work(tx: Tx) -> None:
            state = tx.value("job_state", key=key, cutoff=self._ctx.cutoff(tx))
            if state is None:
                raise JobNotFound(f"no job has the key {key!r}")
            refuse_retry(key, state)
            tx.run("retry_job", key=key)
            sqlite_output.forget(tx, key)
            history.note(tx, key, "retried")
            tx.run("emit_event", kind="wake", key=None)

        await self._ctx.db.write(work)
