"""Retry backoff: exponential with equal jitter, from an injected random fraction."""

from __future__ import annotations

BACKOFF_BASE = 1.0
BACKOFF_CAP = 300.0


def backoff_delay(
    attempt: int,
    random_fraction: float,
    *,
    base: float = BACKOFF_BASE,
    cap: float = BACKOFF_CAP,
) -> float:
    """Seconds to wait before retrying after failed attempt number `attempt` (1-based).

    The ceiling doubles per attempt up to `cap`; the delay is drawn from the upper
    half of it, so retries of many jobs failing together spread out but never come
    back sooner than half the ceiling.
    """
    if not 0.0 <= random_fraction <= 1.0:
        raise ValueError(f"random_fraction must be within [0, 1], got {random_fraction}")
    ceiling = min(cap, base * 2.0 ** max(0, attempt - 1))
    return ceiling / 2.0 + ceiling / 2.0 * random_fraction


LOOP_RETRY_FIRST = 0.1
LOOP_RETRY_CAP = 5.0


def loop_retry_delay(failures_in_a_row: int) -> float:
    """Seconds a long-lived loop waits before trying again (the store, a fork server
    start) after its `failures_in_a_row`-th failure (1-based): 0.1 s doubling up to
    5 s."""
    return min(LOOP_RETRY_CAP, LOOP_RETRY_FIRST * 2.0 ** max(0, failures_in_a_row - 1))
