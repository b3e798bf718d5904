"""When a schedule's next tick is due, and which tick to fire: pure, `now` passed in.

A tick is a point in time the schedule names (every 300 s: the multiples of 300 since
the epoch; cron: the matching minutes in its time zone).  Every supervisor computes the
same ticks from the same settings, and the store lets only one of them fire each tick
(`Store.fire_tick`), so the decision here only has to be deterministic, not exclusive.

Jitter delays each tick by an offset drawn from the schedule's name and the tick, so
every supervisor agrees on it without talking.  Ticks that nobody fired (the whole pool
was down) are counted as missed and not replayed: only the latest due tick fires.

A producer's tick given back unapplied ("released": its supervisor stopped mid-plan, or
it was abandoned) fires again while it is the latest due tick, and counts as missed once
a later one is.
"""

from __future__ import annotations

import enum
import hashlib
import math
from dataclasses import dataclass
from typing import Protocol

# A schedule never fired before fires its latest tick only if it is this fresh;
# otherwise it waits for the next one (a new daily job must not fire at noon for 3 am).
NEW_SCHEDULE_GRACE = 60.0
# Missed ticks are counted one by one for cron; past this many the count is a floor.
MISSED_COUNT_CAP = 100_000


class Cadence(Protocol):
    """The ticks of a schedule, as epoch seconds."""

    def latest(self, at: float) -> float | None:
        """The last tick at or before `at`, or None if there is none."""

    def following(self, after: float) -> float:
        """The first tick strictly after `after`."""


@dataclass(frozen=True)
class Every:
    """Every `seconds`, on the multiples of `seconds` since the epoch."""

    seconds: float

    def latest(self, at: float) -> float | None:
        return float(math.floor(at / self.seconds) * self.seconds)

    def following(self, after: float) -> float:
        tick = float((math.floor(after / self.seconds) + 1) * self.seconds)
        return tick if tick > after else tick + self.seconds

    def between(self, start: float, end: float) -> int:
        """Ticks strictly between two ticks."""
        return max(0, round((end - start) / self.seconds) - 1)


@dataclass(frozen=True, kw_only=True)
class Fire:
    """Fire `tick` now; `not_before` is the tick plus its jitter."""

    tick: float
    not_before: float
    missed: int


@dataclass(frozen=True, kw_only=True)
class Wait:
    """Nothing is due before `until` (epoch seconds)."""

    until: float


def jitter_offset(name: str, tick: float, jitter: float) -> float:
    """A delay in [0, jitter) that every supervisor computes alike for this tick."""
    if jitter <= 0:
        return 0.0
    digest = hashlib.blake2b(f"{name}\0{float(tick)!r}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64 * jitter


def decide_tick(
    cadence: Cadence, *, name: str, jitter: float, last_tick: float | None, now: float,
    released: bool = False, restarted: bool = False,
) -> Fire | Wait:
    """What a supervisor should do for one schedule at store time `now`, knowing the
    tick it last fired (None: never fired in this pool) and whether that tick was
    given back unapplied (`released`).  `restarted`: its producer ended it at
    `last_tick` and its definition changed since (`standing`): it starts again as a new
    schedule does, from a tick after `last_tick`, and counts no missed ticks."""
    tick = _latest_due(cadence, name, jitter, now)
    unfired = tick is not None and (
        last_tick is None or tick > last_tick or (released and tick == last_tick))
    fresh_enough = (last_tick is not None and not restarted) or (
        tick is not None and now - tick <= NEW_SCHEDULE_GRACE + jitter)
    if tick is not None and unfired and fresh_enough:
        missed = 0
        if last_tick is not None and tick > last_tick and not restarted:
            missed = count_between(cadence, last_tick, tick) + int(released)
        return Fire(tick=tick, not_before=tick + jitter_offset(name, tick, jitter), missed=missed)
    after = now if tick is None else max(tick, last_tick if last_tick is not None else tick)
    upcoming = cadence.following(after)
    return Wait(until=upcoming + jitter_offset(name, upcoming, jitter))


def decide_again(
    cadence: Cadence, *, name: str, jitter: float, refused: float, last_tick: float | None,
    now: float,
) -> Fire | Wait:
    """`decide_tick` once the store refused tick `refused` as stale (`Store.fire_tick`):
    another supervisor fired `last_tick` after this one read the record, so its missed
    ticks are counted again from there, not twice.  The store answers "stale" rather
    than "taken" for the refused tick itself only while it is given back (RELEASED)."""
    return decide_tick(cadence, name=name, jitter=jitter, last_tick=last_tick, now=now,
                       released=last_tick is not None and last_tick == refused)


class Standing(enum.Enum):
    """Where a schedule stands after its producer may have ended it."""

    RUNNING = "running"  # never ended
    ENDED = "ended"  # ended, and its definition is still the one that ended it: no tick
    RESTARTED = "restarted"  # ended by an earlier definition: starts again, as if new


def standing(*, ended: bool, ended_fingerprint: str | None, fingerprint: str) -> Standing:
    """A schedule ended by its producer (a plan's "end_schedule", sandbox.EndSchedule)
    fires no tick while its definition (`fingerprint` of its settings) is the one that
    ended it; a change of the definition in pool.toml starts it again.  The store refuses
    the ticks of an ended schedule on its own (`Store.fire_tick`): this only spares the
    calls, and lets a restarted schedule count no missed ticks for its time ended."""
    if not ended:
        return Standing.RUNNING
    return Standing.ENDED if ended_fingerprint == fingerprint else Standing.RESTARTED


def tick_abandoned(
    *, outcome: str | None, fired_at: float | None, timeout: float, grace: float, now: float
) -> bool:
    """Whether a producer's tick, fired at store time `fired_at` and still without an
    outcome ("fired"), is abandoned at `now`: its producer was killed at `timeout` and
    its plan had `grace` more to be applied and recorded, so its supervisor died or lost
    the store on the way.  Another supervisor then gives it back (RELEASED)."""
    return outcome == "fired" and fired_at is not None and now > fired_at + timeout + grace


def _latest_due(cadence: Cadence, name: str, jitter: float, now: float) -> float | None:
    """The latest tick whose jittered time has come: the latest tick, or the one before
    it while the latest one's jitter has not passed yet."""
    tick = cadence.latest(now)
    for _ in range(2):
        if tick is None or tick + jitter_offset(name, tick, jitter) <= now:
            return tick
        tick = cadence.latest(tick - 0.001)
    return None


def count_between(cadence: Cadence, start: float, end: float) -> int:
    """How many ticks lie strictly between `start` and `end`."""
    if isinstance(cadence, Every):
        return cadence.between(start, end)
    count = 0
    tick = cadence.following(start)
    while tick < end and count < MISSED_COUNT_CAP:
        count += 1
        tick = cadence.following(tick)
    return count


def fingerprint(settings: dict[str, object]) -> str:
    """A short hash of a schedule's settings, stored with each tick it fires, so that
    `schedules` shows which version of a schedule fired it."""
    text = repr(sorted(settings.items()))
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()
