"""The PostgreSQL store's job histories: the column `history` of a job's row, written by
the statement of the change each event describes (sql/functions.sql history_add), or in
its transaction (store/sql/history.py)."""

from __future__ import annotations

from typing import Any

import orjson

from supervisor.store.records import JobEvent


def of_row(row: Any) -> tuple[JobEvent, ...]:
    """The events of a job's row (its `history`), oldest first.  A caller's connection
    may load jsonb as text (Django's does)."""
    events = row["history"]
    if isinstance(events, str | bytes):
        events = orjson.loads(events)
    return tuple(JobEvent(at=at, event=event, supervisor=supervisor, token=token, detail=detail)
                 for at, event, supervisor, token, detail in events)
