"""SQLite's `Tx` (store/sql/tx.py): the statements of one transaction, run in the
database's worker thread (db.py), and SQLite's own ways of the steps where the engines
differ.

Its `async` methods never suspend: they call sqlite3 and return, so the worker thread
drives each rule's coroutine to its end by hand (drive.py).  A named statement of
sql/queries.sql may hold several statements, run one after the other (`rows` answers
the last one's); a list or tuple parameter is bound as JSON text, which the statements
read with json_each.

Clocks: `now` is the wall clock (epoch seconds), `lease_now` CLOCK_BOOTTIME, which
never steps (sqlite/store.py); statements see them as :now, and :boot or :lease_now.

Change hints are rows of the `events` table, which every supervisor polls
(events.py): a `wake` for any job made due or ended (one per transaction: the poller
takes a batch of identical hints as one anyway), and `stop`, `notify` and `debug` with
the job's key.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from typing import Any

import orjson

from supervisor.store.records import LIVE_STATES, Completion, DispatchRequest, JobEvent
from supervisor.store.refusals import ADDED, FINISHED_WITHIN_UNIQUE_WINDOW, LIVE, POOL_FULL
from supervisor.store.sql import history
from supervisor.store.sql.tx import Answer, ClaimContext, HolderRequest, Row
from supervisor.store.sqlite.schema import load_queries

EVENT_KEEP_SECONDS = 60.0


@functools.cache
def load_statements() -> dict[str, tuple[str, ...]]:
    """Each name of sql/queries.sql with its statements."""
    found = {}
    for name, body in load_queries().items():
        statements, pending = [], ""
        for line in body.splitlines(keepends=True):
            pending += line
            if sqlite3.complete_statement(pending):
                statements.append(pending.strip())
                pending = ""
        if pending.strip():
            statements.append(pending.strip())
        found[name] = tuple(statements)
    return found


class Tx:
    """The statements of one transaction, with the pool and the store times bound in."""

    def __init__(self, conn: sqlite3.Connection, pool: str, now: float, boot: float,
                 wall_offset: float) -> None:
        self._conn = conn
        self._statements = load_statements()
        self.pool = pool
        self.now = now
        self.lease_now = boot
        self._wall_offset = wall_offset
        self._woke = False  # a `wake` was emitted in this transaction

    def wall_time(self, lease_time: float) -> float:
        """A boot-clock time as a wall-clock epoch time."""
        return lease_time + self._wall_offset

    def execute(self, query: str, **params: Any) -> sqlite3.Cursor:
        """The statements of `query`, run now; the last one's cursor."""
        bound = {"pool": self.pool, "now": self.now, "boot": self.lease_now,
                 "lease_now": self.lease_now}
        for name, value in params.items():
            bound[name] = orjson.dumps(list(value)).decode() \
                if isinstance(value, list | tuple) else value
        cursor = None
        for statement in self._statements[query]:
            cursor = self._conn.execute(statement, bound)
        assert cursor is not None, f"{query}: no statement"
        return cursor

    def fetch(self, query: str, **params: Any) -> list[sqlite3.Row]:
        return self.execute(query, **params).fetchall()

    async def run(self, query: str, **params: Any) -> sqlite3.Cursor:
        return self.execute(query, **params)

    async def rows(self, query: str, **params: Any) -> list[sqlite3.Row]:
        return self.fetch(query, **params)

    async def row(self, query: str, **params: Any) -> sqlite3.Row | None:
        # fetchall, not fetchone: a RETURNING statement finishes its work only when
        # stepped to the end.
        rows = self.fetch(query, **params)
        return rows[0] if rows else None

    async def value(self, query: str, **params: Any) -> Any:
        return self.scalar(query, **params)

    def scalar(self, query: str, **params: Any) -> Any:
        rows = self.fetch(query, **params)
        return rows[0][0] if rows else None

    # The claim's reads and starts.

    async def claim_context(self, lease_ttl: float, *, lock_delay: bool,
                            recover: bool = True) -> ClaimContext:
        """Old events dropped; the pool's last claim, every expired lease (no failover:
        one file has one history)."""
        self.execute("trim_events", cutoff=self.now - EVENT_KEEP_SECONDS)
        last = self.fetch("claim_gap")
        gap = last[0] if last else None
        return ClaimContext(
            last_claim=None if gap is None else gap["last_claim"],
            gap_start=None if gap is None else gap["gap_start"],
            gap_end=None if gap is None else gap["gap_end"],
            paused=[row["name"] for row in self.fetch("paused")],
            expired=self.fetch("expired_leases") if recover else [], note_every=0.0)

    async def due_keys(self, owner: str, handlers: Sequence[str], count: int) -> list[Row]:
        """The jobs reserved for `owner`, then the due ones (each query on its index),
        with the deadline of the lease whose expiry put each back, if any: start_attempt
        clears it, and RETURNING shows the row after the update."""
        rows = self.fetch("reserved_keys", owner=owner, handlers=handlers, count=count)
        return rows + self.fetch("claimable_keys", handlers=handlers, count=count)

    async def start_jobs(self, due: Sequence[Row], owner: str, lease_ttl: float,
                         ) -> list[Row]:
        """Tokens taken at once for all, then each job started and its start noted."""
        if not due:
            return []
        first_token = self.scalar("take_tokens", n=len(due)) - len(due) + 1
        started = []
        for token, job in enumerate(due, start=first_token):
            (row,) = self.fetch("start_attempt", key=job["key"], owner=owner, token=token,
                                lease_ttl=lease_ttl)
            await history.note(self, job["key"], "started", f"attempt {row['attempts']}")
            started.append({**dict(row), "lease_expired_at": job["lease_expired_at"]})
        return started

    async def start_due(self, owner: str, handlers: Sequence[str], count: int,
                        lease_ttl: float) -> list[Row]:
        due = {row["key"]: row for row in await self.due_keys(owner, handlers, count)}
        return await self.start_jobs(list(due.values())[:count], owner, lease_ttl)

    async def send_completion(self, completion: Completion) -> Answer:
        lease = completion.lease
        await history.note(self, lease.key, "succeeded", lease=lease)
        done = self.execute("complete_job", key=lease.key, owner=lease.owner,
                            token=lease.token, result=completion.result).rowcount > 0
        if done:
            self.execute("drop_notes", key=lease.key)
        else:  # succeeded under this very lease: an earlier try whose reply was lost
            done = bool(self.fetch("succeeded_under", key=lease.key, owner=lease.owner,
                                   token=lease.token))

        async def answer() -> bool:
            return done

        return answer

    # Dispatch and reads.

    async def admit_jobs(self, requests: Sequence[DispatchRequest], retention: float, *,
                         limit_pending: bool) -> list[int]:
        """Each request as `_admit`, counting the pending jobs once; a wake if any was
        added."""
        cutoff = self.now - retention
        pending = None
        if limit_pending and self.scalar("max_pending") is not None:
            pending = self.scalar("pending_count")
        codes = []
        for request in requests:
            code = await self._admit(request, cutoff, pending)
            if code == ADDED and pending is not None:
                pending += 1
            codes.append(code)
        if ADDED in codes:
            self.execute("trim_events", cutoff=self.now - EVENT_KEEP_SECONDS)
            self._emit("wake")
        return codes

    async def _admit(self, request: DispatchRequest, cutoff: float, pending: int | None) -> int:
        """Create the job unless its key is live, it finished within the request's unique
        window, or `pending` (None: no limit) reached the pool's max_pending; a code of
        refusals.py."""
        found = self.fetch("job_finished_at", key=request.key, cutoff=cutoff)
        row = found[0] if found else None
        if row is not None and row["state"] in LIVE_STATES:
            return LIVE
        if row is not None and request.unique_for > 0 and row["finished_at"] is not None \
                and self.now - row["finished_at"] < request.unique_for:
            return FINISHED_WITHIN_UNIQUE_WINDOW
        if pending is not None and pending >= self.scalar("max_pending"):
            return POOL_FULL
        self.execute("forget_job_events", key=request.key)
        self.execute("forget_output_runs", key=request.key)
        self.execute("forget_output_chunks", key=request.key)
        self.execute("insert_job", key=request.key, handler=request.handler,
                     payload=request.payload, max_attempts=request.max_attempts,
                     run_at=request.run_at, schedule=request.schedule,
                     priority=request.priority, job_group=request.group,
                     traceparent=request.traceparent, tracestate=request.tracestate)
        self.execute("drop_notes", key=request.key)
        await history.note(self, request.key, "dispatched", request.schedule)
        return ADDED

    async def histories(self, rows: Sequence[Row]) -> list[tuple[JobEvent, ...]]:
        """The rows of `job_events` of each job (of every job in the pool when they are
        many)."""
        keys = [row["key"] for row in rows]
        if len(keys) > 50:
            found = self.fetch("all_job_events")
        else:
            found = [event for key in keys for event in self.fetch("job_events", key=key)]
        events: dict[str, list[JobEvent]] = {}
        for row in found:
            events.setdefault(row["key"], []).append(JobEvent(
                at=row["at"], event=row["event"], supervisor=row["supervisor"],
                token=row["token"], detail=row["detail"]))
        return [tuple(events.get(key, ())) for key in keys]

    # Change hints.

    def _emit(self, kind: str, key: str | None = None) -> None:
        if kind == "wake" and key is None:
            if self._woke:
                return
            self._woke = True
        self.execute("emit_event", kind=kind, key=key)

    async def requeued(self, handler: str, *, due_now: bool) -> None:
        self._emit("wake")

    async def ended(self, key: str) -> None:
        self._emit("wake")

    async def reserved(self, holder: str) -> None:
        self._emit("wake")

    async def tell_holder(self, key: str, request: HolderRequest, detail: str = "") -> None:
        self._emit(request, f"{detail}:{key}" if request == "debug" else key)

    async def wake_pool(self) -> None:
        self.execute("trim_events", cutoff=self.now - EVENT_KEEP_SECONDS)
        self._emit("wake")

    async def left(self, owner: str) -> None:
        """Nothing to do: SQLite's supervisors poll, none waits on a list."""

