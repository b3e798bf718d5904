"""PostgreSQL's `Tx` (store/sql/tx.py): the statements of one transaction on one psycopg
connection, pipelined (db.py), and PostgreSQL's own ways of the steps where the engines
differ.

Clocks: `now`, the database's clock (epoch seconds), read once at the transaction's
start (db.py), once it holds the pool's lock; leases count on it too (`lease_now` is
the same time).

Starts, completions and admissions are SQL functions (sql/functions.sql, sql/schema.sql
dispatch_jobs), one statement each, so that a claim is a few round trips whatever it
starts; a claim's first reads go out together (`claim_context`), and a completion's
answer is read after them.  Its context also carries the pool's failover epoch
(failover.py): after a change of primary, nothing starts until the hold ends.

Change hints are NOTIFY to the supervisor concerned (events.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection, AsyncCursor
from psycopg.rows import DictRow

from supervisor.store.policy import CLAIM_NOTE_EVERY, HISTORY_LIMIT, RECOVER_BATCH
from supervisor.store.postgres import events, failover
from supervisor.store.postgres.dispatch import dispatch_params
from supervisor.store.postgres.history import of_row
from supervisor.store.postgres.schema import load_queries
from supervisor.store.records import Completion, DispatchRequest, JobEvent
from supervisor.store.sql.tx import Answer, ClaimContext, HolderRequest, Row

Connection = AsyncConnection[DictRow]
HOLDER_KINDS = {"stop": "s", "notify": "n", "debug": "d"}  # events.decode reads them


class Tx:
    """The statements of one transaction, with the pool and the store time bound in."""

    def __init__(self, conn: Connection, pool: str, now: float) -> None:
        self._conn = conn
        self._queries = load_queries()
        self.pool = pool
        self.now = now
        self.lease_now = now

    def wall_time(self, lease_time: float) -> float:
        return lease_time

    async def run(self, query: str, **params: Any) -> AsyncCursor[DictRow]:
        return await self._conn.execute(self._queries[query], {
            "pool": self.pool, "now": self.now, "lease_now": self.lease_now, **params})

    async def rows(self, query: str, **params: Any) -> list[DictRow]:
        return await (await self.run(query, **params)).fetchall()

    async def row(self, query: str, **params: Any) -> DictRow | None:
        rows = await self.rows(query, **params)
        return rows[0] if rows else None

    async def value(self, query: str, **params: Any) -> Any:
        row = await self.row(query, **params)
        return None if row is None else next(iter(row.values()))

    # The claim's reads and starts.

    async def claim_context(self, lease_ttl: float, *, lock_delay: bool,
                            recover: bool = True) -> ClaimContext:
        # Both reads go out together: one round trip.
        context_read = await self.run("claim_context")
        expired_read = await self.run("expired_leases", limit=RECOVER_BATCH) if recover else None
        context = await context_read.fetchone()
        expired = await expired_read.fetchall() if expired_read is not None else []
        assert context is not None, "the pool's counter row is made before its first write"
        epoch = await failover.step(self, lease_ttl, context)
        return ClaimContext(
            last_claim=context["last_claim"], gap_start=context["gap_start"],
            gap_end=context["gap_end"], paused=context["paused"], expired=expired,
            note_every=CLAIM_NOTE_EVERY, hold_until=epoch.epoch.hold_until,
            held=lock_delay and epoch.held(self.now))

    async def due_keys(self, owner: str, handlers: Sequence[str], count: int) -> list[Row]:
        return await self.rows("due_keys", owner=owner, handlers=list(handlers), count=count)

    async def start_jobs(self, due: Sequence[Row], owner: str, lease_ttl: float,
                         ) -> list[Row]:
        return await self.rows("start_jobs", keys=[row["key"] for row in due], owner=owner,
                               lease_ttl=lease_ttl, keep=HISTORY_LIMIT)

    async def start_due(self, owner: str, handlers: Sequence[str], count: int,
                        lease_ttl: float) -> list[Row]:
        return await self.rows("start_due", owner=owner, handlers=list(handlers), count=count,
                               lease_ttl=lease_ttl, keep=HISTORY_LIMIT)

    async def send_completion(self, completion: Completion) -> Answer:
        """sql/functions.sql complete_job, sent now; its answer read when asked."""
        lease = completion.lease
        sent = await self.run("complete_job", key=lease.key, owner=lease.owner,
                              token=lease.token, result=completion.result, keep=HISTORY_LIMIT)

        async def answer() -> bool:
            row = await sent.fetchone()
            return row is not None and bool(row["done"])

        return answer

    # Dispatch and reads.

    async def admit_jobs(self, requests: Sequence[DispatchRequest], retention: float, *,
                         limit_pending: bool) -> list[int]:
        codes: list[int] = await self.value(
            "dispatch_jobs", **dispatch_params(self.pool, retention, requests),
            limit_pending=limit_pending)
        return codes

    async def histories(self, rows: Sequence[Row]) -> list[tuple[JobEvent, ...]]:
        return [of_row(row) for row in rows]

    # Change hints.

    async def requeued(self, handler: str, *, due_now: bool) -> None:
        if due_now:
            await events.wake_one(self, handler)

    async def ended(self, key: str) -> None:
        await events.ended(self, key)

    async def reserved(self, holder: str) -> None:
        await events.to_holder(self, holder, "w")

    async def tell_holder(self, key: str, request: HolderRequest, detail: str = "") -> None:
        words = (detail, key) if request == "debug" else (key,)
        holder = await self.value("job_holder", key=key)
        await events.to_holder(self, holder, HOLDER_KINDS[request], *words)

    async def wake_pool(self) -> None:
        await events.wake_pool(self)

    async def left(self, owner: str) -> None:
        await self.run("stop_waiting", owner=owner)
