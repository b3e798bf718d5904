"""Whether the store's master changed under the pool, and until when no lease may be
handed out because of it (Chubby's lock-delay).

Redis replicates asynchronously: a claim or a renewal that the old master acknowledged
may never reach the replica promoted in its place.  The new master then holds the job
pending (or its lease shorter than granted) while the child started under the lost
write still runs, fenced only by its own deadline.  So once a claim sees a master that
did not write the pool's epoch record, the pool enters a new epoch: no claim and no
recovery of an expired lease until `hold_until`, by which every lease the old master can
have granted has run out and its child has fenced itself.  Every such grant was made
before the old master died, so before `seen_at`, and lasted at most the longest lease
ttl the pool's claims asked for (`max_ttl`); a child is killed `fence_margin` before its
lease's end, and FAILOVER_MARGIN more covers the kill landing and the clocks of three
hosts running at slightly different rates.  Renewals go on meanwhile: a lease the new
master holds keeps its job, one it lost answers StaleToken and its child is fenced.

Tokens keep growing across the change: epoch n hands out tokens from n << 32 on, above
all the old master handed out in epoch n - 1, lost or not (fewer than 2**32 a epoch).
A master that missed a whole epoch of its predecessor (a replica whose link was down for
longer than a hold) could number its epoch as that one did, and reuse its tokens; its
hold still keeps their runs apart.

The claim script (lua/claim-10+n.lua) mirrors `step_epoch`; the master's identity is
read inside it, atomically with the claim (a supervisor that read it beforehand may have
read the old master).
"""

from __future__ import annotations

from dataclasses import dataclass

FAILOVER_MARGIN = 1.0
TOKEN_EPOCH_BITS = 32


@dataclass(frozen=True, kw_only=True)
class Epoch:
    """The pool's epoch record: the master that wrote it (its run id and replication id:
    a restart changes the first, a promotion the second), its number, when the change
    that began it was seen (store time; None for the pool's first epoch, which follows
    no lease), and the longest lease ttl claimed in the pool."""

    master: str
    number: int
    seen_at: float | None
    max_ttl: float

    @property
    def hold_until(self) -> float | None:
        """Until when no lease may be handed out (None: never held)."""
        if self.seen_at is None:
            return None
        return self.seen_at + self.max_ttl + FAILOVER_MARGIN


@dataclass(frozen=True, kw_only=True)
class EpochStep:
    """What a claim does: write `epoch` (if it differs from the record), raise the token
    counter to at least `token_floor` (0: leave it), and hand out nothing while held."""

    epoch: Epoch
    changed: bool
    token_floor: int

    def held(self, now: float) -> bool:
        hold = self.epoch.hold_until
        return hold is not None and now < hold


def step_epoch(recorded: Epoch | None, master: str, *, has_leases: bool, lease_ttl: float,
               now: float) -> EpochStep:
    """The epoch after a claim with `lease_ttl` on `master` at store time `now`.

    `has_leases`: the pool ever handed out a lease on this master's data (its token
    counter or running set exists).  A pool with no record and no lease is new: its first
    epoch holds nothing.  A record missing from a pool that has leases was lost with the
    old master's writes (or predates epochs): that is a change too.
    """
    if recorded is not None and recorded.master == master:
        if lease_ttl <= recorded.max_ttl:
            return EpochStep(epoch=recorded, changed=False, token_floor=0)
        # A longer ttl: leases that long may be granted from now on.  While held, the
        # hold grows with it, as if the old master could have granted one.
        wider = Epoch(master=master, number=recorded.number, seen_at=recorded.seen_at,
                      max_ttl=lease_ttl)
        return EpochStep(epoch=wider, changed=False, token_floor=0)
    if recorded is None and not has_leases:
        return EpochStep(epoch=Epoch(master=master, number=1, seen_at=None, max_ttl=lease_ttl),
                         changed=False, token_floor=0)
    number = 1 if recorded is None else recorded.number + 1
    max_ttl = lease_ttl if recorded is None else max(recorded.max_ttl, lease_ttl)
    return EpochStep(epoch=Epoch(master=master, number=number, seen_at=now, max_ttl=max_ttl),
                     changed=True, token_floor=number << TOKEN_EPOCH_BITS)


def ended_by_failover(lease_end: float | None, hold_until: float | None) -> bool:
    """A lease that ran out before the hold after a master change ended (`hold_until`,
    whether or not it is still held) was ended by the failover, not by its job: its
    renewals may be the lost writes, and none could be handed out again before then.
    Its recovery counts no lease loss."""
    return lease_end is not None and hold_until is not None and lease_end <= hold_until
