"""The PostgreSQL store's job histories: the table `job_events`, written inside the
transaction of the change each event describes (as sqlite/history.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from supervisor.store.policy import DETAIL_CHARS, HISTORY_LIMIT
from supervisor.store.postgres.db import Tx
from supervisor.store.records import JobEvent, Lease


async def note(tx: Tx, key: str, event: str, detail: str | None = None, *,
               lease: Lease | None = None) -> None:
    """Add the event; with `lease`, only if that lease holds the job."""
    await tx.run("note_job_event", key=key, event=event, detail=detail,
                 owner=lease and lease.owner, token=lease and lease.token, keep=HISTORY_LIMIT)


async def forget(tx: Tx, key: str) -> None:
    await tx.run("forget_job_events", key=key)


def first_line(text: str | None) -> str | None:
    """An error's first line, as an event's detail."""
    return None if text is None else text.split("\n", 1)[0][:DETAIL_CHARS]


async def note_pid(tx: Tx, lease: Lease, pid: int | None) -> None:
    """The first pid reported for a run goes into the detail of its start, if that is
    still the job's newest event.  Run before the renewal stores the pid."""
    if pid is not None:
        await tx.run("fill_start_pid", key=lease.key, owner=lease.owner, token=lease.token,
                     pid=pid)


async def of_jobs(tx: Tx, keys: Sequence[str]) -> dict[str, tuple[JobEvent, ...]]:
    found: dict[str, list[JobEvent]] = {}
    for row in await tx.rows("jobs_events", keys=list(keys)):
        found.setdefault(row["key"], []).append(_event(row))
    return {key: tuple(events) for key, events in found.items()}


def from_arrays(row: Any) -> tuple[JobEvent, ...]:
    """The events of a row that carries them as arrays (sql/queries.sql job_with_events)."""
    if row["event_at"] is None:
        return ()
    return tuple(JobEvent(at=at, event=event, supervisor=supervisor, token=token, detail=detail)
                 for at, event, supervisor, token, detail in zip(
                     row["event_at"], row["event_name"], row["event_supervisor"],
                     row["event_token"], row["event_detail"], strict=True))


def _event(row: Any) -> JobEvent:
    return JobEvent(at=row["at"], event=row["event"], supervisor=row["supervisor"],
                    token=row["token"], detail=row["detail"])
