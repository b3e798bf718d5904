"""When the claimer calls the store: a claim takes jobs for the free slots and, as a
side effect, recovers the pool's expired leases. With no slot free only the recovery
is left to do, and that is due once a poll interval, not at every wake-up."""

from __future__ import annotations


def wait_before_claim(
    free_slots: int, now: float, last_claim: float, poll_interval: float
) -> float:
    """Seconds to wait before the next claim (0: claim now)."""
    if free_slots > 0:
        return 0.0
    return max(0.0, last_claim + poll_interval - now)
