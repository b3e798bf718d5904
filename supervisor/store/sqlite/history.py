"""The SQLite store's job histories: the table `job_events`, written inside the
transaction of the change each event describes (the Redis store keeps the same in the
job's hash, lua/_lib.lua note_event).

An event names the supervisor and token of the run that holds the job when it is
noted: a start is noted once the job runs, every other change (an end, a release)
before it is made.  Each job keeps its newest HISTORY_LIMIT events; a trigger deletes
them with the record, and a new dispatch of the key forgets them first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from supervisor.store.policy import DETAIL_CHARS, HISTORY_LIMIT
from supervisor.store.records import JobEvent, Lease
from supervisor.store.sqlite.db import Tx


def note(tx: Tx, key: str, event: str, detail: str | None = None, *,
         lease: Lease | None = None) -> None:
    """Add the event; with `lease`, only if that lease holds the job."""
    tx.run("note_job_event", key=key, event=event, detail=detail,
           owner=lease and lease.owner, token=lease and lease.token)
    tx.run("trim_job_events", key=key, keep=HISTORY_LIMIT)


def forget(tx: Tx, key: str) -> None:
    tx.run("forget_job_events", key=key)


def first_line(text: str | None) -> str | None:
    """An error's first line, as an event's detail."""
    return None if text is None else text.split("\n", 1)[0][:DETAIL_CHARS]


def note_pid(tx: Tx, lease: Lease, pid: int | None) -> None:
    """The first pid reported for a run goes into the detail of its start, if that is
    still the job's newest event.  Run before the renewal stores the pid."""
    if pid is not None:
        tx.run("fill_start_pid", key=lease.key, owner=lease.owner, token=lease.token, pid=pid)


def of_job(tx: Tx, key: str) -> tuple[JobEvent, ...]:
    return tuple(_event(row) for row in tx.rows("job_events", key=key))


def of_jobs(tx: Tx, keys: Sequence[str]) -> dict[str, tuple[JobEvent, ...]]:
    """The histories of `keys` (of every job in the pool when they are many)."""
    if len(keys) > 50:
        rows = tx.rows("all_job_events")
    else:
        rows = [row for key in keys for row in tx.rows("job_events", key=key)]
    found: dict[str, list[JobEvent]] = {}
    for row in rows:
        found.setdefault(row["key"], []).append(_event(row))
    return {key: tuple(events) for key, events in found.items()}


def _event(row: Any) -> JobEvent:
    return JobEvent(at=row["at"], event=row["event"], supervisor=row["supervisor"],
                    token=row["token"], detail=row["detail"])
