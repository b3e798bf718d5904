"""The pool at a glance: the `status --json` object (cli/status.py renders it as text)."""

from __future__ import annotations

from typing import Any

from supervisor.core.rebalance import shares
from supervisor.pool.loads import member_load, takes_work
from supervisor.store.records import ALL_STATES, PoolSnapshot


def render_status_json(snapshot: PoolSnapshot) -> dict[str, Any]:
    now = snapshot.store_time
    # Per supervisor, the handlers whose jobs share a child there (child_concurrency > 1).
    shared = {entry.info.id: frozenset(entry.info.shared) for entry in snapshot.supervisors}
    share = shares([member_load(entry, eligible=takes_work(entry))
                    for entry in snapshot.supervisors])
    return {
        "pool": snapshot.pool,
        "store_time": now,
        "store": {
            "state": snapshot.store.state,
            "since": snapshot.store.since,
            "error": snapshot.store.error,
            # The master behind Sentinel (host:port), and until when claims are held
            # after it changed (core/failover.py); None when not.
            "master": snapshot.store.master,
            "failover_hold_until": snapshot.store.hold_until,
        },
        "supervisors": [
            {
                "id": entry.info.id,
                "host": entry.info.host,
                "pid": entry.info.pid,
                "capacity": entry.info.capacity,
                "running": entry.running,
                "state": entry.info.state if entry.last_seen <= entry.info.lease_ttl else "lost",
                "last_seen": round(entry.last_seen, 3),
                "lease_ttl": entry.info.lease_ttl,
                # Its part of the pool's rebalanceable jobs; None while it takes no work.
                "share": share.get(entry.info.id),
                "inbound": entry.inbound,
                # What its handlers' sandboxes cannot enforce on its host.
                "sandbox_notes": list(entry.info.sandbox_notes),
            }
            for entry in snapshot.supervisors
        ],
        "moving": [
            {
                "key": record.key,
                "handler": record.handler,
                "from": record.moved_from,
                "to": record.reserved_for,
                "reserved_remaining": (
                    round(record.reserved_until - now, 3) if record.reserved_until else None
                ),
            }
            for record in snapshot.moving
        ],
        "counts": {state: snapshot.counts.get(state, 0) for state in ALL_STATES},
        "paused": snapshot.paused.as_json(),
        "running": [
            {
                "key": record.key,
                "handler": record.handler,
                "supervisor": record.supervisor,
                "pid": record.stats.pid,
                "token": record.token,
                "attempt": record.attempts,
                "runtime": round(now - record.started_at, 3) if record.started_at else None,
                "lease_remaining": (
                    round(record.lease_deadline - now, 3) if record.lease_deadline else None
                ),
                "rss_bytes": record.stats.rss_bytes,
                "cpu_percent": record.stats.cpu_percent,
                "shared_child": record.handler in shared.get(record.supervisor or "", ()),
            }
            for record in snapshot.running
        ],
    }
