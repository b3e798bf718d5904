"""When the claimer calls the store.  A claim takes jobs for the free slots and, as a side
effect, recovers the pool's expired leases, which is due once a poll interval.  A claim
that left room waits for work: the store wakes it when a job of its handlers becomes
claimable, so until then a freed slot calls for no claim, and the results of the jobs
that end are stored on their own (a settle: their completions alone, none of a claim's
fixed part)."""

from __future__ import annotations

from dataclasses import dataclass


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
