"""The SQLite store's retry, run inside the caller's transaction."""

from __future__ import annotations

from supervisor.errors import JobNotFound
from supervisor.store.retry_rules import refuse_retry
from supervisor.store.sqlite import history
from supervisor.store.sqlite import output as sqlite_output
from supervisor.store.sqlite.db import Tx


def retry_job(tx: Tx, key: str, cutoff: float) -> None:
    """Raises as `Store.retry` does."""
    state = tx.value("job_state", key=key, cutoff=cutoff)
    if state is None:
        raise JobNotFound(f"no job has the key {key!r}")
    refuse_retry(key, state)
    tx.run("retry_job", key=key)
    sqlite_output.forget(tx, key)
    history.note(tx, key, "retried")
    tx.run("emit_event", kind="wake", key=None)
