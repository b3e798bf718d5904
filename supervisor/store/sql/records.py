"""The SQL stores' rows as the store's values: job records, members, stats, the
snapshot `status` shows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from supervisor.store.members import live_members
from supervisor.store.records import (
    ALL_STATES,
    JobEvent,
    JobRecord,
    JobStats,
    Membership,
    PoolSnapshot,
    StoreHealth,
)
from supervisor.store.sql.limits import paused
from supervisor.store.sql.tx import Row, Tx


async def read_members(tx: Tx) -> Membership:
    running: dict[str, dict[str, int]] = {}
    inbound: dict[str, int] = {}
    for row in await tx.rows("member_load"):
        if row["handler"] is None:
            inbound[row["id"]] = row["n"]
        else:
            running.setdefault(row["id"], {})[row["handler"]] = row["n"]
    entries = [(row["info"], row["silent_for"]) for row in await tx.rows("supervisor_entries")]
    return Membership(store_time=tx.now, members=live_members(entries, running, inbound))


def stats_params(stats: JobStats | None) -> dict[str, Any]:
    stats = stats or JobStats()
    return {"pid": stats.pid, "rss_bytes": stats.rss_bytes, "cpu_percent": stats.cpu_percent}


def job_record(row: Row, events: tuple[JobEvent, ...] = (), *,
               wall_time: Callable[[float], float] | None = None) -> JobRecord:
    """The record of a job's row; `wall_time`: how a time of the lease clock reads as a
    wall-clock time (Tx.wall_time; None: the lease clock is the wall clock)."""
    deadline = row["lease_deadline"]
    if deadline is not None and wall_time is not None:
        deadline = wall_time(deadline)
    return JobRecord(
        key=row["key"], handler=row["handler"], state=row["state"], attempts=row["attempts"],
        max_attempts=row["max_attempts"], token=row["token"], supervisor=row["supervisor"],
        payload=decode_blob(row["payload"]), result=decode_blob(row["result"]),
        error=row["error"], created_at=row["created_at"], started_at=row["started_at"],
        finished_at=row["finished_at"], lease_deadline=deadline,
        lease_losses=row["lease_losses"], snoozes=row["snoozes"],
        stop_requested=bool(row["stop_requested"]),
        stats=JobStats(pid=row["pid"], rss_bytes=row["rss_bytes"],
                       cpu_percent=row["cpu_percent"]),
        checkpoint=decode_blob(row["checkpoint"]), checkpoint_at=row["checkpoint_at"],
        reserved_for=row["reserved_for"], reserved_until=row["reserved_until"],
        moved_from=row["moved_from"], run_at=row["run_at"], schedule=row["schedule"],
        priority=row["priority"], group=row["job_group"], events=events,
        traceparent=row["traceparent"],
    )


def decode_blob(blob: bytes | None) -> Any:
    return None if blob is None else orjson.loads(blob)


def blob(value: bytes | memoryview | None) -> bytes | None:
    return None if value is None else bytes(value)


async def read_pending_by_handler(tx: Tx) -> dict[str, int]:
    return {row["handler"]: row["n"] for row in await tx.rows("pending_by_handler")}


async def read_counts(tx: Tx, cutoff: float) -> dict[str, int]:
    counts: dict[str, int] = dict.fromkeys(ALL_STATES, 0)
    for row in await tx.rows("state_counts", cutoff=cutoff):
        counts[row["state"]] += row["n"]
    return counts


async def read_snapshot(tx: Tx, pool: str, cutoff: float, error: str | None) -> PoolSnapshot:
    """What `status` shows; `error`: why the snapshot's tidying write failed, if it did."""
    running = tuple(job_record(row, wall_time=tx.wall_time)
                    for row in await tx.rows("running_jobs"))
    moving = tuple(job_record(row, wall_time=tx.wall_time)
                   for row in await tx.rows("moving_jobs"))
    health = await tx.row("health")
    if error is None:
        store = StoreHealth(state="ok", since=health["ok_since"] if health else tx.now)
    else:
        store = StoreHealth(state="failing", since=health["last_ok"] if health else tx.now,
                            error=error)
    return PoolSnapshot(pool=pool, store_time=tx.now,
                        supervisors=(await read_members(tx)).members,
                        counts=await read_counts(tx, cutoff), running=running, store=store,
                        moving=moving, paused=await paused(tx))
