"""The SQL stores' job histories, written inside the transaction of the change each
event describes (the Redis store keeps the same in the job's hash, lua/_lib.lua
note_event).  Where they are kept is the engine's: SQLite's table `job_events`
(sqlite/tx.py reads it), the column `history` of a PostgreSQL job's row (postgres/history.py,
sql/functions.sql history_add, whose SQL functions note their own events).

An event names the supervisor and token of the run that holds the job when it is
noted: a start is noted once the job runs, every other change (an end, a release)
before it is made.  Each job keeps its newest HISTORY_LIMIT events."""

from __future__ import annotations

from supervisor.store.policy import DETAIL_CHARS, HISTORY_LIMIT
from supervisor.store.records import Lease
from supervisor.store.sql.tx import Tx


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
