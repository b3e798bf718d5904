"""The PostgreSQL store's claim: sql/claim.py's, then, at most every CHECK_EVERY seconds
until it sees them analyzed, a look at the planner's statistics of a fresh pool's tables
(statistics.py).  Claims drop the records past retention at most every DROP_EVERY
seconds (postgres/store.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

from supervisor.core.limits import Limits
from supervisor.errors import StoreFailure
from supervisor.store.postgres import statistics
from supervisor.store.records import ClaimBatch, Completion
from supervisor.store.sql.claim import SqlClaim

# Claims drop the records past retention at most this often (s): every read leaves them
# out by their finish time anyway, so the delete need not run in every claim.
DROP_EVERY = 1.0


class PgClaim(SqlClaim):
    _statistics_at = float("-inf")  # store time it last looked at the tables' statistics
    _analyzed = False  # it saw poolsup.jobs analyzed (postgres/statistics.py)

    async def claim(self, owner: str, handlers: Sequence[str], count: int, lease_ttl: float,
                    max_lease_losses: int, completing: Sequence[Completion] = (),
                    claim_id: str = "", limits: Mapping[str, Limits] | None = None,
                    only_completing: bool = False, lane: int = 0,
                    recover: bool = True) -> ClaimBatch:
        batch = await super().claim(owner, handlers, count, lease_ttl, max_lease_losses,
                                    completing, claim_id, limits, only_completing, lane,
                                    recover)
        store_time = self._claimed_at
        if not self._analyzed and store_time - self._statistics_at >= statistics.CHECK_EVERY:
            self._statistics_at = store_time
            with contextlib.suppress(StoreFailure):  # the claim is made: it is answered
                self._analyzed = await self._ctx.db.write(statistics.analyzed, pool_lock=False)
        return batch
