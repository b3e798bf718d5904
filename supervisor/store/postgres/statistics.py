"""The planner's statistics of a fresh pool's tables.

Until autovacuum first analyzes poolsup.jobs (its first pass comes up to a minute after
the rows, `autovacuum_naptime`), the planner has no statistics, rates an index that holds
`pool` (the pending jobs', the running leases') as good as the primary key (pool, key),
and a statement on one job walks every pending or running row of the pool: a burst of
dispatches into a new pool costs time in the square of its size.  So a claim, at most
every CHECK_EVERY seconds until it sees them analyzed, analyzes the tables itself once
they hold FIRST_ANALYZE_ROWS changed rows; from then on autovacuum keeps them current.
"""

from __future__ import annotations

from supervisor.store.sql.tx import Tx

CHECK_EVERY = 2.0  # seconds between looks while the tables were never analyzed
FIRST_ANALYZE_ROWS = 100  # rows changed before the first analyze is worth its cost


async def analyzed(tx: Tx) -> bool:
    """Whether poolsup.jobs was analyzed (by autovacuum or here); analyzes the tables
    when it never was and enough rows changed."""
    row = await tx.row("jobs_statistics")
    if row is None or row["analyzed"]:
        return True
    if row["changed"] < FIRST_ANALYZE_ROWS:
        return False
    # Only the tables' owner may analyze them: anyone else gets a warning, and autovacuum
    # will do it in its time.
    await tx.run("analyze_tables")
    return True
