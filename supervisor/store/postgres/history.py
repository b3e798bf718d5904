"""The PostgreSQL store's job histories: the column `history` of a job's row, written by
the statement of the change each event describes (sql/functions.sql history_add), or in
its transaction (as sqlite/history.py)."""

from __future__ import annotations

from typing import Any

import orjson

from supervisor.store.policy import DETAIL_CHARS, HISTORY_LIMIT
from supervisor.store.postgres.db import Tx
from supervisor.store.records import JobEvent, Lease


async def note(tx: Tx, key: str, event: str, detail: str | None = None, *,
               lease: Lease | None = None) -> None:
    """Add the event; with `lease`, only if that lease holds the job."""
    await tx.run("note_job_event", key=key, event=event, detail=detail,
                 owner=lease and lease.owner, token=lease and lease.token, keep=HISTORY_LIMIT)


def first_line(text: str | None) -> str | None:
    """An error's first line, as an event's detail."""
    return None if text is None else text.split("\n", 1)[0][:DETAIL_CHARS]


async def note_pid(tx: Tx, lease: Lease, pid: int | None) -> None:
    """The first pid reported for a run goes into the detail of its start, if that is
    still the job's newest event.  Run before the renewal stores the pid."""
    if pid is not None:
        await tx.run("fill_start_pid", key=lease.key, owner=lease.owner, token=lease.token,
                     pid=pid)


def of_row(row: Any) -> tuple[JobEvent, ...]:
    """The events of a job's row (its `history`), oldest first.  A caller's connection
    may load jsonb as text (Django's does)."""
    events = row["history"]
    if isinstance(events, str | bytes):
        events = orjson.loads(events)
    return tuple(JobEvent(at=at, event=event, supervisor=supervisor, token=token, detail=detail)
                 for at, event, supervisor, token, detail in events)
