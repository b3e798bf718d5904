"""Rebalance: how many movable jobs each member should run, and which member sheds
jobs to which.

Every member plans from the same kind of view (the store's `members()`), and each
carries out only the moves whose source it is: no leader, no second round trip.  A
member's share is its capacity-weighted part of all movable jobs held by members that
may take work, capped by its free room; the integer shares are each within one job of
the exact part, and where the rounding has a choice it goes to the member that already
holds more, so a split that is already as even as integers allow moves nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class MemberLoad:
    """One member as a plan sees it.

    `movable`: jobs of rebalanceable handlers it holds or that are on their way to it;
    `fixed`: its other jobs (they use capacity, they never move); `eligible`: it may
    receive and keep work (running, settled, renewing on time)."""

    id: str
    capacity: int
    movable: int
    fixed: int = 0
    eligible: bool = True
    handlers: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Move:
    source: str
    target: str


def shares(members: Sequence[MemberLoad]) -> dict[str, int]:
    """Each eligible member's share of the movable jobs the eligible members hold."""
    eligible = [member for member in members if member.eligible]
    total = sum(member.movable for member in eligible)
    room = {member.id: max(0, member.capacity - member.fixed) for member in eligible}
    result: dict[str, int] = {}
    open_members = list(eligible)
    left = total
    while open_members:
        weight = sum(member.capacity for member in open_members)
        exact = {member.id: left * member.capacity / weight for member in open_members}
        full = [member for member in open_members if exact[member.id] >= room[member.id]]
        if not full:
            result.update(_round(exact, {m.id: m.movable for m in open_members}, left))
            break
        for member in full:
            result[member.id] = room[member.id]
            left -= room[member.id]
        open_members = [member for member in open_members if member not in full]
    return result


def _round(exact: Mapping[str, float], holding: Mapping[str, int], total: int) -> dict[str, int]:
    """Integer parts summing to `total`: each the floor or the ceiling of its exact part;
    the ceilings go first to members holding more than their floor (fewer moves), then
    to the largest remainders, then by id."""
    floors = {member: math.floor(part + 1e-9) for member, part in exact.items()}
    extra = total - sum(floors.values())
    rounded_up = sorted(
        (member for member, part in exact.items() if part - floors[member] > 1e-9),
        key=lambda member: (
            -(holding[member] > floors[member]),
            -(exact[member] - floors[member]),
            member,
        ),
    )
    for member in rounded_up[:extra]:
        floors[member] += 1
    return floors


def plan_moves(members: Sequence[MemberLoad]) -> list[Move]:
    """The moves that bring every eligible member to its share: members over their
    share (in id order) shed to members under it (in id order), one job per Move.  A
    member that is not eligible takes part in no move: a draining member hands its jobs
    off by draining, a member that stopped renewing loses them to recovery."""
    share = shares(members)
    loads = {member.id: member for member in members if member.id in share}
    over = [(m.id, m.movable - share[m.id]) for m in _by_id(loads.values())
            if m.movable > share[m.id]]
    under = [(m.id, share[m.id] - m.movable) for m in _by_id(loads.values())
             if m.movable < share[m.id]]
    moves: list[Move] = []
    wanted = iter(under)
    target, missing = next(wanted, (None, 0))
    for source, excess in over:
        while excess and target is not None:
            moves.append(Move(source, target))
            excess -= 1
            missing -= 1
            if not missing:
                target, missing = next(wanted, (None, 0))
    return moves


def _by_id(members: Iterable[MemberLoad]) -> list[MemberLoad]:
    return sorted(members, key=lambda member: member.id)


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A job this member could move: its handler, how long it has run, and whether it
    came here because its lease ran out elsewhere."""

    key: str
    handler: str
    runtime: float
    after_lease_loss: bool = False


def pick_jobs(
    candidates: Sequence[Candidate],
    targets: Sequence[tuple[str, frozenset[str]]],
    *,
    losses_reset_after: float = 0.0,
) -> list[tuple[str, str]]:
    """(key, target) pairs: for each target in turn (with the handlers it runs), the
    job of a handler it runs that has run the shortest time (least work to redo),
    each job at most once.  A target that runs none of the candidates' handlers gets
    nothing.

    A job that came here by a lease loss stays until it has run `losses_reset_after`
    (the store then resets its count of losses in a row): moved sooner, it could go
    back to the member that just lost it (one frozen, back since), and each loss there
    would add to the same count until the job fails."""
    left = sorted((job for job in candidates
                   if not job.after_lease_loss or job.runtime >= losses_reset_after),
                  key=lambda job: (job.runtime, job.key))
    picked: list[tuple[str, str]] = []
    for target, handlers in targets:
        job = next((job for job in left if job.handler in handlers), None)
        if job is not None:
            left.remove(job)
            picked.append((job.key, target))
    return picked


def settled(first_seen: float | None, now: float, settle: float) -> bool:
    """A member takes moved work only after it has been seen without a break for
    `settle` seconds: one that flaps in and out never draws a move."""
    return first_seen is not None and now - first_seen >= settle


def first_seen_times(
    previous: Mapping[tuple[str, str], float], taking_work: Iterable[tuple[str, str]],
    now: float,
) -> dict[tuple[str, str], float]:
    """Since when each member (id, instance) that takes work now has done so without a
    break: one that stopped (it missed its renewals, froze, drained) settles again."""
    return {member: previous.get(member, now) for member in taking_work}
