"""`Store.jobs_page` and `Store.latest_finished` on SQLite: a page by key on the
(pool, key) index, and the newest finished records of a state by finish time."""

from __future__ import annotations

from supervisor.store.paging import checked_finished, checked_limit, prefix_upper_bound
from supervisor.store.records import JobRecord, JobState
from supervisor.store.sqlite.db import Tx
from supervisor.store.sqlite.records import job_record


def jobs_page(tx: Tx, state: JobState | None, *, prefix: str, after: str, limit: int,
              cutoff: float) -> list[JobRecord]:
    rows = tx.rows("jobs_page", state=state, prefix=prefix, after=after,
                   upper=prefix_upper_bound(prefix), cutoff=cutoff, limit=checked_limit(limit))
    return [job_record(row, tx) for row in rows]


def latest_finished(tx: Tx, state: JobState, *, limit: int, cutoff: float) -> list[JobRecord]:
    rows = tx.rows("latest_finished", state=checked_finished(state), cutoff=cutoff,
                   limit=checked_limit(limit))
    return [job_record(row, tx) for row in rows]
