"""Lease timing: how often to renew and when a child must be dead (self-fencing)."""

from __future__ import annotations

RENEWALS_PER_TTL = 3
MAX_LEASE_LOSSES = 5


def renew_interval(lease_ttl: float) -> float:
    """Renew three times per TTL, so two renewals in a row may fail or lag."""
    return lease_ttl / RENEWALS_PER_TTL


def fence_margin(lease_ttl: float) -> float:
    """How long before the store's lease deadline the child must already be dead.

    The margin covers the time SIGKILL takes to land and the fork server's own
    scheduling delay on a loaded host.
    """
    return min(1.0, lease_ttl * 0.25)


def fence_deadline(sent_at: float, lease_ttl: float) -> float:
    """The local monotonic time by which a child must be killed unless renewed again.

    `sent_at` is when the last successful renewal (or the claim) was *sent*: the
    store computed its deadline no earlier than that, so store deadline >= sent_at +
    lease_ttl, and killing at sent_at + lease_ttl - margin is always before it.
    """
    return sent_at + lease_ttl - fence_margin(lease_ttl)


def renewal_lag(expected_at: float, sent_at: float) -> float:
    """How late a renewal went out compared with its schedule (never negative)."""
    return max(0.0, sent_at - expected_at)
