"""The SQL stores' claim: in one transaction (on PostgreSQL, one that holds the pool's
lock), the completions handed in, the records past retention dropped, then leases.py's
claim (expired leases judged, due jobs started) within the pool's limits (a part of
both SQL stores: context.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from supervisor.core.lease_losses import failing_window
from supervisor.core.limits import Limits
from supervisor.store.policy import MIN_FAILING_SPAN, claim_deadline
from supervisor.store.records import ClaimBatch, Completion
from supervisor.store.sql import leases
from supervisor.store.sql.context import SqlPart
from supervisor.store.sql.tx import Tx


class SqlClaim(SqlPart):
    claim_lanes = 1  # Store.claim_lanes
    _dropped_at = float("-inf")  # store time of this store's last drop
    _claimed_at = 0.0  # the lease clock's time in this store's last claim

    async def claim(self, owner: str, handlers: Sequence[str], count: int, lease_ttl: float,
                    max_lease_losses: int, completing: Sequence[Completion] = (),
                    claim_id: str = "", limits: Mapping[str, Limits] | None = None,
                    only_completing: bool = False, lane: int = 0,
                    recover: bool = True) -> ClaimBatch:
        # No claim id is read (a transaction's answer is lost only with its connection):
        # the lane does not matter.
        ctx = self._ctx
        if only_completing and count == 0:
            return await self._settle(completing)
        limits = limits or {}
        sent_at = ctx.witness.sending()
        since = ctx.witness.since(sent_at)
        claim_by = claim_deadline(ctx.witness.store_time(sent_at), lease_ttl)
        store_time = 0.0

        async def work(tx: Tx) -> ClaimBatch:
            nonlocal store_time
            store_time = tx.lease_now
            # Sent now; on PostgreSQL their answers are read after the claim's first read:
            # no round trip.
            answers = [await tx.send_completion(completion) for completion in completing]
            if not ctx.drop_every or tx.now - self._dropped_at >= ctx.drop_every:
                await tx.run("drop_expired_records", cutoff=ctx.cutoff(tx))
                self._dropped_at = tx.now
            late = claim_by is not None and tx.lease_now > claim_by
            batch = await leases.claim(
                tx, owner, handlers, 0 if late else count, lease_ttl, max_lease_losses,
                failing_window(since, tx.lease_now, min_span=MIN_FAILING_SPAN), limits,
                lock_delay=not ctx.no_lock_delay, recover=recover)
            completed = tuple([await answer() for answer in answers])
            return dataclasses.replace(batch, completed=completed)

        batch = await ctx.witnessed(sent_at, ctx.db.write(work))
        ctx.witness.answered(sent_at, store_time, reported=True, hold=lease_ttl)
        self._claimed_at = store_time
        return batch

    async def _settle(self, completing: Sequence[Completion]) -> ClaimBatch:
        """The completions alone, in one transaction without the pool's lock: each
        changes its own job's row, token-guarded, and makes room for no one else."""
        ctx = self._ctx
        store_time = 0.0

        async def work(tx: Tx) -> tuple[bool, ...]:
            nonlocal store_time
            store_time = tx.lease_now
            answers = [await tx.send_completion(completion) for completion in completing]
            return tuple([await answer() for answer in answers])

        sent_at = ctx.witness.sending()
        completed = await ctx.witnessed(sent_at, ctx.db.write(work, pool_lock=False))
        ctx.witness.answered(sent_at, store_time, reported=False)
        return ClaimBatch(jobs=(), recovered=0, next_due_in=None, completed=completed)
