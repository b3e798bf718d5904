"""What systemd is told about a running supervisor: the STATUS= line, and whether a
drain that runs past its budget still earns more stop time (EXTEND_TIMEOUT_USEC)."""

from __future__ import annotations

from dataclasses import dataclass, replace

# Each extension asks for this many more seconds; it is renewed while the drain earns
# it, so a drain that stops making progress is cut off at most this long after.
DRAIN_EXTENSION = 10.0


def status_line(*, running: int, capacity: int, store_failing: bool, draining: bool) -> str:
    store = "store failing" if store_failing else "store ok"
    if draining:
        return f"draining: {running} job(s) left, {store}"
    return f"{running}/{capacity} jobs running, {store}"


@dataclass(frozen=True, kw_only=True)
class DrainProgress:
    started_at: float
    jobs_left: int
    progressed_at: float  # when a job last left (or the drain started)

    @classmethod
    def start(cls, *, jobs_left: int, now: float) -> DrainProgress:
        return cls(started_at=now, jobs_left=jobs_left, progressed_at=now)

    def observe(self, *, jobs_left: int, now: float) -> DrainProgress:
        progressed_at = now if jobs_left < self.jobs_left else self.progressed_at
        return replace(self, jobs_left=jobs_left, progressed_at=progressed_at)


def drain_extension(progress: DrainProgress, *, now: float, budget: float) -> float | None:
    """Seconds of stop time to ask for, or None to let systemd's TimeoutStopSec run.

    `budget` is how long a drain may take by the config (drain_timeout + stop_grace +
    lease_ttl: the last for outcomes retried while the store fails), which may be longer
    than the unit's TimeoutStopSec.  Past it, only a job that ended lately earns more.
    """
    within_budget = now - progress.started_at < budget
    progressing = now - progress.progressed_at < DRAIN_EXTENSION
    return DRAIN_EXTENSION if within_budget or progressing else None
