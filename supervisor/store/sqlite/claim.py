"""The SQLite store's claim: in one transaction, the completions handed in, the records
past retention and old events dropped, then leases.py's claim (expired leases judged,
due jobs started) within the pool's limits (a part of SqliteStore: sqlite/context.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from supervisor.core.lease_losses import failing_window
from supervisor.core.limits import Limits
from supervisor.store.policy import MIN_FAILING_SPAN, claim_deadline
from supervisor.store.records import ClaimBatch, Completion
from supervisor.store.sqlite import leases
from supervisor.store.sqlite.context import SqlitePart
from supervisor.store.sqlite.db import Tx
from supervisor.store.sqlite.dispatch import EVENT_KEEP_SECONDS


class SqliteClaim(SqlitePart):
    async def claim(self, owner: str, handlers: Sequence[str], count: int, lease_ttl: float,
                    max_lease_losses: int, completing: Sequence[Completion] = (),
                    claim_id: str = "", limits: Mapping[str, Limits] | None = None,
                    only_completing: bool = False, lane: int = 0) -> ClaimBatch:
        # only_completing: the whole claim runs (Store.claim allows it); no claim id is
        # read, so the lane does not matter.
        ctx = self._ctx
        limits = limits or {}
        sent_at = ctx.witness.sending()
        since = ctx.witness.since(sent_at)
        claim_by = claim_deadline(ctx.witness.store_time(sent_at), lease_ttl)
        store_boot = 0.0

        def work(tx: Tx) -> ClaimBatch:
            nonlocal store_boot
            store_boot = tx.boot
            completed = tuple(leases.complete(tx, completion) for completion in completing)
            tx.run("drop_expired_records", cutoff=ctx.cutoff(tx))
            tx.run("trim_events", cutoff=tx.now - EVENT_KEEP_SECONDS)
            late = claim_by is not None and tx.boot > claim_by
            batch = leases.claim(
                tx, owner, handlers, 0 if late else count, lease_ttl, max_lease_losses,
                failing_window(since, tx.boot, min_span=MIN_FAILING_SPAN), limits)
            return dataclasses.replace(batch, completed=completed)

        batch = await ctx.witnessed(sent_at, ctx.db.write(work))
        ctx.witness.answered(sent_at, store_boot, reported=True, hold=lease_ttl)
        return batch
