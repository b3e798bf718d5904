"""The pool at a glance: the `status --json` object and its text rendering."""

from __future__ import annotations

from typing import Any

from supervisor.cli.limit_view import limit_line
from supervisor.cli.schedule_view import summary_line
from supervisor.core.rebalance import shares
from supervisor.pool.loads import member_load, takes_work
from supervisor.store.records import ALL_STATES, PoolSnapshot


def render_status_json(snapshot: PoolSnapshot) -> dict[str, Any]:
    now = snapshot.store_time
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
            }
            for record in snapshot.running
        ],
    }


def _size(value: int | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value = value / 1024  # type: ignore[assignment]
    return "-"


def render_status_text(status: dict[str, Any]) -> str:
    lines = [f"pool {status['pool']}"]
    store = status["store"]
    if store["state"] != "ok":
        lines.append(f"store: {store['state']} ({store['error']})")
    if store.get("master"):
        lines.append(f"store master: {store['master']}")
    if store.get("failover_hold_until"):
        left = store["failover_hold_until"] - status["store_time"]
        lines.append(f"store master changed: no job starts for {left:.1f} s more (lock-delay)")
    counts = status["counts"]
    lines.append("jobs: " + ", ".join(f"{counts[state]} {state}" for state in ALL_STATES))
    paused = status["paused"]
    if paused["pool"]:
        lines.append("paused: the whole pool (poolsup resume to go on)")
    if paused["handlers"]:
        lines.append("paused handlers: " + ", ".join(paused["handlers"]))
    for handler, view in status.get("limits", {}).items():
        lines.append(limit_line(handler, view))
    if status.get("schedules"):
        lines.append(summary_line(status["schedules"]))
    lines.append("")
    lines.append(f"{'SUPERVISOR':<20} {'HOST':<20} {'PID':>7} {'JOBS':>9} {'SHARE':>5} "
                 f"{'STATE':<9} SEEN")
    for sup in status["supervisors"]:
        jobs = f"{sup['running']}/{sup['capacity']}"
        share = "-" if sup["share"] is None else str(sup["share"])
        lines.append(
            f"{sup['id']:<20} {sup['host']:<20} {sup['pid']:>7} {jobs:>9} {share:>5} "
            f"{sup['state']:<9} {sup['last_seen']:.1f}s ago"
        )
    if not status["supervisors"]:
        lines.append("(no live supervisors)")
    for sup in status["supervisors"]:
        for note in sup.get("sandbox_notes", ()):
            lines.append(f"sandbox on {sup['id']}: {note}")
    if status["moving"]:
        lines.append("")
        lines.append(f"{'MOVING':<24} {'HANDLER':<14} {'FROM':<14} {'TO':<14} RESERVED")
        for move in status["moving"]:
            left = move["reserved_remaining"]
            lines.append(
                f"{move['key'][:24]:<24} {move['handler'][:14]:<14} {str(move['from'])[:14]:<14} "
                f"{str(move['to'])[:14]:<14} {'-' if left is None else f'{left:.1f}s'}"
            )
    if status["running"]:
        lines.append("")
        lines.append(
            f"{'KEY':<24} {'HANDLER':<14} {'SUPERVISOR':<14} {'PID':>7} {'TOKEN':>6} "
            f"{'TRY':>3} {'RUNTIME':>8} {'LEASE':>6} {'RSS':>10} {'CPU%':>6}"
        )
        for job in status["running"]:
            cpu = "-" if job["cpu_percent"] is None else f"{job['cpu_percent']:.0f}"
            runtime = "-" if job["runtime"] is None else f"{job['runtime']:.1f}s"
            lease = "-" if job["lease_remaining"] is None else f"{job['lease_remaining']:.1f}s"
            owner = str(job["supervisor"])[:14]
            lines.append(
                f"{job['key'][:24]:<24} {job['handler'][:14]:<14} {owner:<14} "
                f"{job['pid'] or '-':>7} {job['token']:>6} {job['attempt']:>3} {runtime:>8} "
                f"{lease:>6} {_size(job['rss_bytes']):>10} {cpu:>6}"
            )
    return "\n".join(lines)
