"""The SQLite store's renewal: extend the leases an owner still holds, store their
stats, and mark the owner seen if its membership entry is this instance's (the same
step as lua/renew-4+2n.lua)."""

from __future__ import annotations

from collections.abc import Sequence

from supervisor.store.policy import HEALTH_GAP, LOSSES_RESET_TTLS
from supervisor.store.records import JobStats, Lease, MembershipState, RenewResult
from supervisor.store.sqlite import history
from supervisor.store.sqlite.db import Tx
from supervisor.store.sqlite.records import stats_params


def renew(tx: Tx, owner: str, instance: str, leases: Sequence[Lease], lease_ttl: float,
          stats: dict[str, JobStats]) -> RenewResult:
    for lease in leases:
        history.note_pid(tx, lease, (stats.get(lease.key) or JobStats()).pid)
    rows = [row for lease in leases for row in tx.rows(
        "renew_lease", key=lease.key, token=lease.token, owner=owner,
        deadline=tx.boot + lease_ttl, reset_after=LOSSES_RESET_TTLS * lease_ttl,
        **stats_params(stats.get(lease.key)))]
    entry = tx.row("supervisor_entry", id=owner)
    membership: MembershipState = "missing"
    if entry is not None:
        membership = "ok" if entry["instance"] == instance else "taken"
    if membership == "ok":
        tx.run("touch_supervisor", id=owner)
    tx.run("touch_health", gap=HEALTH_GAP)
    renewed = {(row["key"], row["token"]) for row in rows}
    return RenewResult(
        lost=frozenset((lease.key, lease.token) for lease in leases
                       if (lease.key, lease.token) not in renewed),
        stop_requested=frozenset(row["key"] for row in rows if row["stop_requested"]),
        notified=frozenset(row["key"] for row in rows if row["notified"]),
        store_time=tx.now,
        membership=membership,
    )
