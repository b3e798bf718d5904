"""The PostgreSQL store across a change of primary (guarantee 12), as the Redis store
across a failover: claims, renewals and fences run on the primary only (db.py refuses a
standby), and each claim reads, inside its transaction, which primary it runs on (its
system identifier and timeline).  A standby promoted with asynchronous replication may
lack the last commits of the old primary (a claim, a renewal): once a claim sees another
primary than the pool's epoch record names, the pool enters a new epoch, and no job is
started until every lease the old primary can have granted has run out and its child
has fenced itself (core/failover.py: the lock-delay, the same numbers as Redis's), and
the token counter jumps past every token of the old primary."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from supervisor.core.failover import Epoch, EpochStep, step_epoch
from supervisor.store.sql.tx import Tx


async def step(tx: Tx, lease_ttl: float, context: Mapping[str, Any]) -> EpochStep:
    """The pool's epoch after a claim with `lease_ttl` in this transaction, written;
    `context` is the claim's (sql/queries.sql claim_context)."""
    recorded = None if context["master"] is None else Epoch(
        master=context["master"], number=context["number"], seen_at=context["seen_at"],
        max_ttl=context["max_ttl"])
    stepped = step_epoch(recorded, str(context["primary_identity"]),
                         has_leases=context["token"] > 0, lease_ttl=lease_ttl, now=tx.now)
    if stepped.epoch != recorded:
        epoch = stepped.epoch
        await tx.run("save_epoch", master=epoch.master, number=epoch.number,
                     seen_at=epoch.seen_at, max_ttl=epoch.max_ttl)
    if stepped.token_floor:
        await tx.run("raise_tokens", floor=stepped.token_floor)
    return stepped
