"""Which due jobs a claim may start under the pool-wide limits of their handlers.

A handler may cap how many of its jobs run at once across the pool (`max_running`), how
many of one dispatch group run at once (`max_running_per_group`), and how many start in
any period (`rate_limit`, "N/s", "N/m" or "N/h").  The store enforces them when it hands
out a job, in the same atomic step, so no supervisor starts a job past a limit even for a
moment.  Running counts include a crashed supervisor's jobs until their leases run out
and a claim recovers them.  The rate is a sliding window over the store's clock: a start
is allowed while fewer than N starts of the handler happened in the last period.

Pure: `now` is store seconds passed in.  The Lua claim script (lua/claim-10+n.lua)
implements `startable` the same way; both SQL stores (SQLite, PostgreSQL) pass it the due
jobs highest priority first, oldest first within one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from supervisor.errors import ConfigError

_PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"\s*([1-9][0-9]*)\s*/\s*([smh])\s*")


@dataclass(frozen=True)
class Rate:
    """At most `starts` starts in any `period` seconds."""

    starts: int
    period: float

    @classmethod
    def parse(cls, text: str) -> Rate:
        match = _RATE.fullmatch(text)
        if match is None:
            raise ConfigError(f"rate {text!r} is not N/s, N/m or N/h with N a whole number "
                              "above 0")
        return cls(int(match[1]), _PERIODS[match[2]])

    def __str__(self) -> str:
        unit = {value: name for name, value in _PERIODS.items()}[self.period]
        return f"{self.starts}/{unit}"


@dataclass(frozen=True)
class Limits:
    """A handler's pool-wide limits; None: no such limit."""

    max_running: int | None = None
    max_running_per_group: int | None = None
    rate: Rate | None = None

    @property
    def unlimited(self) -> bool:
        return self.max_running is None and self.max_running_per_group is None \
            and self.rate is None


@dataclass(frozen=True)
class Due:
    """A due job the claim could start."""

    key: str
    handler: str
    group: str | None = None


@dataclass
class Usage:
    """What the pool uses of the limits now: running jobs per handler and per (handler,
    group), and the store times of each handler's starts within its rate's period."""

    running: dict[str, int]
    running_in_group: dict[tuple[str, str], int]
    recent_starts: dict[str, list[float]]


def starts_in_window(starts: Iterable[float], now: float, rate: Rate) -> int:
    """How many of `starts` fall in the period that ends now: (now - period, now]."""
    return sum(1 for at in starts if now - rate.period < at <= now)


def rate_allows(starts: Iterable[float], now: float, rate: Rate) -> bool:
    return starts_in_window(starts, now, rate) < rate.starts


def next_rate_slot(starts: Sequence[float], now: float, rate: Rate) -> float | None:
    """When the window will hold a free slot again (store seconds), or None if it has
    one now."""
    inside = sorted(at for at in starts if now - rate.period < at <= now)
    if len(inside) < rate.starts:
        return None
    return inside[len(inside) - rate.starts] + rate.period


def startable(
    due: Iterable[Due], count: int, limits: Mapping[str, Limits], usage: Usage, now: float
) -> list[Due]:
    """Up to `count` of `due`, in their order, that may start now without taking any
    handler past a limit.  `usage` is updated with the starts chosen."""
    chosen: list[Due] = []
    for job in due:
        if len(chosen) >= count:
            break
        limit = limits.get(job.handler, Limits())
        running = usage.running.get(job.handler, 0)
        if limit.max_running is not None and running >= limit.max_running:
            continue
        group = (job.handler, job.group) if job.group is not None else None
        if group is not None and limit.max_running_per_group is not None \
                and usage.running_in_group.get(group, 0) >= limit.max_running_per_group:
            continue
        starts = usage.recent_starts.setdefault(job.handler, [])
        if limit.rate is not None and not rate_allows(starts, now, limit.rate):
            continue
        chosen.append(job)
        usage.running[job.handler] = running + 1
        if group is not None:
            usage.running_in_group[group] = usage.running_in_group.get(group, 0) + 1
        starts.append(now)
    return chosen
