"""The SQL stores' pool-wide limits and pauses, as steps of a transaction (on
PostgreSQL, one that holds the pool's lock): what the pool uses of each limited
handler's limits (core/limits.py), the starts a rate limit counts (on the lease clock),
and which handlers no claim serves (pausing and resuming: steering.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from supervisor.core.limits import Limits, Usage, next_rate_slot
from supervisor.store.records import Paused
from supervisor.store.sql.tx import Tx


async def paused(tx: Tx) -> Paused:
    return Paused.of(row["name"] for row in await tx.rows("paused"))


async def starts_within(tx: Tx, handler: str, period: float) -> tuple[float, list[float]]:
    """The store time (the lease clock) and the handler's starts within `period` before it."""
    starts = [row["at"] for row in await tx.rows("recent_starts", handler=handler)]
    return tx.lease_now, [at for at in starts if at > tx.lease_now - period]


def served(paused_names: Sequence[str], handlers: Sequence[str]) -> list[str]:
    """The handlers a claim serves: none while the pool is paused, else those not
    paused."""
    names = Paused.of(paused_names)
    if names.pool:
        return []
    return [handler for handler in handlers if handler not in names.handlers]


async def usage(tx: Tx, limits: Mapping[str, Limits]) -> Usage:
    """Running jobs per limited handler and per (handler, group), and each rate-limited
    handler's starts within its period (older ones are dropped)."""
    found = Usage(running={}, running_in_group={}, recent_starts={})
    limited = [handler for handler, limit in limits.items() if not limit.unlimited]
    if not limited:
        return found
    for row in await tx.rows("running_counts", handlers=limited):
        handler, group, running = row["handler"], row["job_group"], row["running"]
        found.running[handler] = found.running.get(handler, 0) + running
        if group is not None:
            found.running_in_group[(handler, group)] = running
    for handler in limited:
        rate = limits[handler].rate
        if rate is not None:
            await tx.run("forget_old_starts", handler=handler, period=rate.period)
            found.recent_starts[handler] = [
                row["at"] for row in await tx.rows("recent_starts", handler=handler)]
    return found


async def note_starts(tx: Tx, limits: Mapping[str, Limits], handlers: Sequence[str]) -> None:
    """Count these starts (one handler name per start) for their handlers' rates."""
    for handler in handlers:
        limit = limits.get(handler)
        if limit is not None and limit.rate is not None:
            await tx.run("note_start", handler=handler)


async def next_slot_in(tx: Tx, limits: Mapping[str, Limits],
                       handlers: Sequence[str]) -> float | None:
    """Seconds until a rate-limited handler among `handlers` may start a job again, if
    one may not now."""
    waits = []
    for handler in handlers:
        rate = limits.get(handler, Limits()).rate
        if rate is None:
            continue
        _now, starts = await starts_within(tx, handler, rate.period)
        slot = next_rate_slot(starts, tx.lease_now, rate)
        if slot is not None:
            waits.append(max(0.0, slot - tx.lease_now))
    return min(waits, default=None)
