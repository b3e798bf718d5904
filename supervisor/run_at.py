"""When a delayed job may start: `--in SECONDS` or `--at TIME` read into epoch seconds."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from supervisor.errors import UsageError

# What a date can hold (years 1-9999), less a day for any time zone: a start time past
# these could not be shown.
EARLIEST_RUN_AT = datetime(1, 1, 2, tzinfo=UTC).timestamp()
LATEST_RUN_AT = datetime(9999, 12, 30, tzinfo=UTC).timestamp()
RUN_AT_RANGE = "0001-01-02 to 9999-12-30 UTC"


def run_at_from(in_seconds: str | None, at: str | None, *, now: float) -> float | None:
    """Epoch seconds, or None for at once.  A time in the past means at once; the
    store's clock decides when the job is due."""
    if in_seconds is not None and at is not None:
        raise UsageError("give --in or --at, not both")
    if in_seconds is not None:
        try:
            seconds = float(in_seconds)
        except ValueError:
            raise UsageError(f"--in must be a number of seconds (got {in_seconds!r})") from None
        if not math.isfinite(seconds) or seconds < 0:
            raise UsageError(f"--in must be 0 or more seconds (got {in_seconds!r})")
        if now + seconds > LATEST_RUN_AT:
            raise UsageError(f"--in must end by 9999-12-30 UTC (got {in_seconds!r})")
        return now + seconds
    if at is not None:
        try:
            parsed = datetime.fromisoformat(at)
        except ValueError:
            raise UsageError(
                f"--at must be an ISO 8601 time such as 2026-12-01T08:00:00Z (got {at!r})"
            ) from None
        try:
            moment = parsed.timestamp()  # without an offset: this host's local time
        except (ValueError, OverflowError, OSError):
            moment = math.nan
        if not EARLIEST_RUN_AT <= moment <= LATEST_RUN_AT:
            raise UsageError(f"--at must be a time from {RUN_AT_RANGE} (got {at!r})")
        return moment
    return None


def check_run_at(run_at: float | None) -> float | None:
    if run_at is not None and not (isinstance(run_at, int | float) and math.isfinite(run_at)):
        raise UsageError(f"run_at must be epoch seconds (got {run_at!r})")
    if run_at is not None and not EARLIEST_RUN_AT <= run_at <= LATEST_RUN_AT:
        raise UsageError(f"run_at must be epoch seconds from {RUN_AT_RANGE} (got {run_at!r})")
    return None if run_at is None else float(run_at)


def format_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="seconds")
