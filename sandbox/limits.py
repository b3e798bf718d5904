"""Memory and CPU limits on a job's whole process tree, and the reasons a user reads.

The fork server samples the tree of every job that has a limit (`sandbox.proctree`)
and kills the tree when a limit is passed. Sampling is adaptive: every
`MAX_INTERVAL` while memory grows slowly, down to `MIN_INTERVAL` when at the rate
it grows it could reach the limit before the next sample, so that a fast allocation
is caught close to the limit. With many jobs sampled, the slow interval grows so that
sampling stays within about a tenth of a core. Each process also gets RLIMIT_CPU
(see `sandbox.confinement`), which holds even if the fork server were stuck.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sandbox.proctree import Usage

MAX_INTERVAL = 0.05
MIN_INTERVAL = 0.005
_SAMPLE_COST = 0.00005  # seconds to read a small tree from /proc, measured generously
_CPU_SHARE = 0.1

_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def format_size(size: int, *, round_up: bool = False) -> str:
    """`100 MiB`, `1.5 GiB`, `512 bytes`; to a tenth of the unit, rounded up if asked
    (so a peak just over a limit never reads as the limit itself)."""
    for unit, scale in _UNITS:
        if size >= scale:
            tenths = size * 10 / scale
            value = (math.ceil(tenths) if round_up else round(tenths)) / 10
            return f"{value:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size} bytes"


def slow_interval(watched: int) -> float:
    """The interval between samples of a job that is not near its limit."""
    return max(MAX_INTERVAL, watched * _SAMPLE_COST / _CPU_SHARE)


def memory_reason(limit: int, peak: int) -> str:
    return f"memory limit {format_size(limit)} exceeded (peak {format_size(peak, round_up=True)})"


def cpu_reason(limit: float) -> str:
    return f"cpu limit {limit:g} s exceeded"


@dataclass(eq=False, kw_only=True)
class TreeWatch:
    """The limits of one job and what the samples of its tree showed so far."""

    memory_limit: int | None
    cpu_limit: float | None
    cpu_base: float = 0.0  # the tree's CPU time when the job started (a reused child's)
    peak_rss: int = 0
    cpu_seconds: float = 0.0  # the most seen: a sample can miss an exited process
    due: float = 0.0  # when the next sample is due, on the fork server's clock
    _last_rss: int = 0
    _last_at: float | None = None

    def observe(self, usage: Usage, now: float, slowest: float = MAX_INTERVAL) -> str | None:
        """Take a sample; the reason if a limit is passed. Sets when to sample next:
        after `slowest` at most."""
        self.peak_rss = max(self.peak_rss, usage.rss_bytes)
        self.cpu_seconds = max(self.cpu_seconds, usage.cpu_seconds - self.cpu_base)
        growth = 0.0
        if self._last_at is not None and now > self._last_at:
            growth = (usage.rss_bytes - self._last_rss) / (now - self._last_at)
        self._last_rss, self._last_at = usage.rss_bytes, now
        self.due = now + self._next_interval(usage.rss_bytes, growth, slowest)
        return self.exceeded()

    def exceeded(self) -> str | None:
        if self.memory_limit is not None and self.peak_rss > self.memory_limit:
            return memory_reason(self.memory_limit, self.peak_rss)
        if self.cpu_limit is not None and self.cpu_seconds > self.cpu_limit:
            return cpu_reason(self.cpu_limit)
        return None

    def _next_interval(self, rss: int, growth: float, slowest: float) -> float:
        if self.memory_limit is None or growth <= 0:
            return slowest
        # Half the time it would take to reach the limit at the current rate.
        reach = max(0, self.memory_limit - rss) / growth
        return min(slowest, max(MIN_INTERVAL, reach / 2))
