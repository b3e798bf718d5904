"""The PostgreSQL store's claim: in one transaction that holds the pool's lock, the
completions handed in, the records past retention dropped, then leases.py's claim
(expired leases judged, due jobs started) within the pool's limits (a part of
PgStore: postgres/context.py), as sqlite/claim.py."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence

from supervisor.core.lease_losses import failing_window
from supervisor.core.limits import Limits
from supervisor.errors import StoreFailure
from supervisor.store.policy import MIN_FAILING_SPAN, claim_deadline
from supervisor.store.postgres import leases, statistics
from supervisor.store.postgres.context import PgPart
from supervisor.store.postgres.db import Tx
from supervisor.store.records import ClaimBatch, Completion

# Claims drop the records past retention at most this often (s): every read leaves them
# out by their finish time anyway, so the delete need not run in every claim.
DROP_EVERY = 1.0


class PgClaim(PgPart):
    _dropped_at = float("-inf")  # store time of this store's last drop
    _statistics_at = float("-inf")  # store time it last looked at the tables' statistics
    _analyzed = False  # it saw poolsup.jobs analyzed (postgres/statistics.py)

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
        store_time = 0.0

        async def work(tx: Tx) -> ClaimBatch:
            nonlocal store_time
            store_time = tx.now
            # Sent now, their answers read after the claim's first read: no round trip.
            completions = [await leases.send_completion(tx, completion)
                           for completion in completing]
            if tx.now - self._dropped_at >= DROP_EVERY:
                await tx.run("drop_expired_records", cutoff=ctx.cutoff(tx))
                self._dropped_at = tx.now
            late = claim_by is not None and tx.now > claim_by
            batch = await leases.claim(
                tx, owner, handlers, 0 if late else count, lease_ttl, max_lease_losses,
                failing_window(since, tx.now, min_span=MIN_FAILING_SPAN), limits,
                lock_delay=not ctx.no_lock_delay)
            completed = tuple([await leases.completed(answer) for answer in completions])
            return dataclasses.replace(batch, completed=completed)

        batch = await ctx.witnessed(sent_at, ctx.db.write(work))
        ctx.witness.answered(sent_at, store_time, reported=True, hold=lease_ttl)
        if not self._analyzed and store_time - self._statistics_at >= statistics.CHECK_EVERY:
            self._statistics_at = store_time
            with contextlib.suppress(StoreFailure):  # the claim is made: it is answered
                self._analyzed = await ctx.db.write(statistics.analyzed, pool_lock=False)
        return batch
