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


def outcome_deadline(fence_at: float, lease_ttl: float, *, draining: bool) -> float:
    """Until when a job's outcome that the store did not take is tried again.

    The store may hold the lease past the fence: by the fence's margin, and by a
    lease_ttl more if it runs late a renewal it took while it did not answer (a frozen
    Redis runs what it had buffered when it thaws).  An outcome stored then keeps the
    lease's end from counting as a loss; a stale token changes nothing.  A draining
    supervisor stops at the fence, to exit within its drain's budget.
    """
    if draining:
        return fence_at
    return fence_at + fence_margin(lease_ttl) + lease_ttl
