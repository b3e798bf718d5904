"""The PostgreSQL store's dispatch.  Jobs are added by one SQL function,
poolsup.dispatch_jobs (sql/schema.sql; Tx.admit_jobs), one statement per call: the same
statement runs on a caller's own connection, inside the caller's transaction
(`dispatch(..., connection=conn)`, postgres/caller.py).  It takes no pool-wide lock; a
dispatch tied to a producer's tick (`fired`) and a tick's own dispatch run in a
transaction that holds it, as every other write does (sql/dispatch.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from supervisor.errors import DispatchRefused
from supervisor.store.records import DispatchRequest, FiredTick
from supervisor.store.sql.dispatch import SqlDispatch, any_refused, refusals

if TYPE_CHECKING:
    from supervisor.store.postgres.db import PgDatabase


def request_json(request: DispatchRequest) -> dict[str, Any]:
    """A request as poolsup.dispatch_jobs reads it (the payload as JSON text)."""
    return {"key": request.key, "handler": request.handler,
            "payload": request.payload.decode(), "max_attempts": request.max_attempts,
            "run_at": request.run_at, "schedule": request.schedule,
            "priority": request.priority, "group": request.group,
            "unique_for": request.unique_for, "traceparent": request.traceparent,
            "tracestate": request.tracestate}


def dispatch_params(pool: str, retention: float,
                    requests: Sequence[DispatchRequest]) -> dict[str, Any]:
    return {"pool": pool, "retention": retention,
            "jobs": Jsonb([request_json(request) for request in requests])}


class PgDispatch(SqlDispatch):
    _db: PgDatabase

    async def dispatch_each(
        self, requests: Sequence[DispatchRequest], *, fired: FiredTick | None = None
    ) -> list[DispatchRefused | None]:
        if not requests or fired is not None:
            return await super().dispatch_each(requests, fired=fired)
        # One statement on its own: no pool lock, no store time needed.
        (row,) = await self._db.write_one("dispatch_jobs", limit_pending=True,
                                          **dispatch_params(self._ctx.pool,
                                                            self._ctx.retention, requests))
        codes = row["dispatch_jobs"]
        max_pending = None
        if any_refused(codes):
            rows = await self._db.read_one("max_pending")
            max_pending = rows[0]["max_pending"] if rows else None
        return refusals(requests, codes, max_pending)
