"""When the claimer calls the store.  A claim takes jobs for the free slots and, as a side
effect, recovers the pool's expired leases, which is due once a poll interval.  A claim
that left room waits for work: the store wakes it when a job of its handlers becomes
claimable, so until then a freed slot calls for no claim, and the results of the jobs
that end are stored on their own (a settle: their completions alone, none of a claim's
fixed part), a few milliseconds after the first of them, so that a claim that comes
meanwhile carries them and one settle stores those of the same moment.  A result not yet
stored is not durable: the job's lease still covers it, and if its supervisor dies
first, the job runs again once that lease is recovered, never at the same time."""

from __future__ import annotations

from dataclasses import dataclass

SETTLE_AFTER = 0.003  # seconds a result waits for a claim to carry it before a settle


@dataclass(frozen=True)
class ClaimView:
    """What the claimer knows when it wakes up.  `next_look`: the poll after the last
    claim (recovery), or sooner, when the earliest held-back job it reported is due.
    `waiting_for_work`: the last claim left room, was not held back by a change of the
    store's master, and no pool-wide limit may have kept a due job from it; `woken`:
    the store rang since that claim."""

    free_slots: int
    now: float
    next_look: float
    waiting_for_work: bool
    woken: bool


def claim_now(view: ClaimView) -> bool:
    """Whether to claim now; if not, the results waiting (if any) go in a settle."""
    if view.now >= view.next_look:
        return True
    if view.free_slots == 0:
        return False
    return view.woken or not view.waiting_for_work


def next_look(last_claim: float, poll_interval: float, next_due_in: float | None) -> float:
    """When the claimer claims again at the latest, after a claim at `last_claim`."""
    look = last_claim + poll_interval
    if next_due_in is not None:
        look = min(look, last_claim + max(0.0, next_due_in))
    return look


def settle_due(waiting_since: float, now: float) -> float:
    """When the results waiting since `waiting_since` go in a settle (`now` or later)."""
    return max(now, waiting_since + SETTLE_AFTER)
