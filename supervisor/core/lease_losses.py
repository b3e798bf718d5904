"""Whether a lease that ran out counts as a loss of its job, and what its recovery does.

The rule, the same on every store: a loss counts unless a live supervisor itself saw
the store failing over that lease's end.  The evidence is the recovering claim's own:
every claim carries `since`, the store time at which this supervisor's calls to the
store began to fail or go unanswered (the sending of its oldest failed call since its
last claim went through, else the sending of this claim), and the store reads its own
clock when the claim runs.  So a claim held up by a frozen store, or sent after
refused calls (out of memory, read-only, unreachable), spans the store's failure:
[since, now] is a failing window, if it is at least `min_span` long (shorter is only
the ordinary time a call takes).  Supervisors claim at least every half second, so
after an outage that ended a lease, the first claim that recovers it comes from a
supervisor that saw the outage too.  A lease whose holder died (a job that crashes or
reboots its host) ran out while nobody's calls failed: it counts, and a job whose
leases keep running out is failed after `max_losses` whatever the store.

The first claim after an outage may come from a supervisor that saw none of it (one
started, or thawed, while the store was down): its claim carries no window.  The store
sees the outage as a gap in its claims (none of any supervisor for `min_gap`), so a
lease the gap may have ended is not judged by a claim that did not witness it: one that
ended inside the gap, or within a lease's ttl after it (its renewals fell in the gap).
It is left for a claim that did witness it, and judged by whichever claim comes once
both the gap and the lease ended `defer` ago (a supervisor that was there claims every
half second and retries a failing store within a second).

Pure: times are store seconds passed in.  The Lua claim script (lua/claim-10+n.lua)
implements the same two functions; its numbers come from Python as arguments.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True)
class FailingWindow:
    """Store times over which one live supervisor saw the store failing."""

    start: float
    end: float


def failing_window(since: float | None, now: float, *, min_span: float) -> FailingWindow | None:
    """The window a claim sent with `since` and run at `now` witnessed, if any."""
    if since is None or now - since < min_span:
        return None
    return FailingWindow(since, now)


def loss_counts(lease_end: float | None, window: FailingWindow | None) -> bool:
    """Does the expiry of a lease that ended at `lease_end` count as a loss of its job?
    Not if it ended inside the window (the store failed over it); an unknown end
    counts."""
    if window is None or lease_end is None:
        return True
    return not window.start <= lease_end <= window.end


@dataclass(frozen=True)
class WriteGap:
    """Store times between two writes of the pool, with none in between."""

    start: float
    end: float


def write_gap(last_write: float | None, now: float, *, min_gap: float) -> WriteGap | None:
    """The gap a write at `now` ends, if the last write before it was `min_gap` ago or
    more."""
    if last_write is None or now - last_write < min_gap:
        return None
    return WriteGap(last_write, now)


def claim_note_due(last_claim: float | None, now: float, gap: WriteGap | None, *,
                   every: float) -> bool:
    """Whether a claim at `now` writes itself down as the pool's last: when it ends a gap,
    when the last written is `every` old or more, or when that one lies ahead of `now` (the
    store's clock stepped back: a gap would be missed until the clock came back to it)."""
    return gap is not None or last_claim is None or not 0 <= now - last_claim < every


def judged_later(lease_end: float | None, window: FailingWindow | None, gap: WriteGap | None,
                 now: float, *, ttl: float, defer: float) -> bool:
    """Is the recovery of a lease that ended at `lease_end` left for a later claim?
    Yes if this claim would count it but the store's last gap in claims may have ended
    it (it ended in the gap or within `ttl` after), and the later of the gap's end and
    the lease's was less than `defer` ago."""
    if gap is None or lease_end is None or now - max(gap.end, lease_end) >= defer:
        return False
    return loss_counts(lease_end, window) and gap.start <= lease_end <= gap.end + ttl


class Recovery(enum.Enum):
    STOPPED = "stopped"  # a stop was asked for: the expiry ends the job
    FAILED = "failed"  # its leases ran out `max_losses` times in a row
    REQUEUED = "requeued"  # pending again, in front, the attempt given back


def recovery(losses: int, *, stop_requested: bool, max_losses: int) -> Recovery:
    """What the recovery of an expired lease does, given the job's count of losses in a
    row including this one if it counts (`max_losses` 0: no limit)."""
    if stop_requested:
        return Recovery.STOPPED
    if max_losses > 0 and losses >= max_losses:
        return Recovery.FAILED
    return Recovery.REQUEUED
