"""Results waiting for the next claim: a job's settle hands its result over and waits;
the claimer carries every waiting result in its next claim and answers each."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from supervisor.doorbell import Latch
from supervisor.errors import StaleToken, StoreFailure, StoreUnavailable
from supervisor.store.records import Completion, Lease

# A result waits this long for a claim to carry it (a claim waits while no fork server
# is ready), then is completed on its own.
WITH_CLAIM_WAIT = 1.0


@dataclass(eq=False)
class PendingResult:
    """A result handed over, until the claim that carried it answers."""

    completion: Completion
    answered: Latch = field(default_factory=Latch)
    stored: bool = False
    failure: StoreFailure | None = None


class PendingResults:
    def __init__(self, wake_claimer: Callable[[], None]) -> None:
        self._wake_claimer = wake_claimer
        self._waiting: list[PendingResult] = []
        self._waiting_since = math.inf  # the loop's time of the first result waiting
        self._closed: StoreFailure | None = None
        # Each result's deadline for an answer, the soonest first, watched by one timer
        # (not one per result); answered ones leave as they come to the front.
        self._deadlines: list[tuple[float, int, PendingResult, float]] = []
        self._count = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    @property
    def waiting(self) -> bool:
        return bool(self._waiting)

    @property
    def waiting_since(self) -> float:
        """The event loop's time when the oldest result waiting was handed over (inf:
        none waits)."""
        return self._waiting_since if self._waiting else math.inf

    async def complete(self, lease: Lease, result: bytes, *,
                       wait: float = WITH_CLAIM_WAIT) -> None:
        """Store a job's result with the next claim.  Raises `StaleToken` if its lease
        was stale, `StoreFailure` if that claim failed, no claim will come, or none
        answered within `wait` (the caller then completes on its own: a complete sent
        twice stores once).  The wait is a timer, not a cancel scope: the result stays
        with the claims to come, as the one sent on its own may be lost too."""
        if self._closed is not None:
            raise self._closed
        pending = PendingResult(Completion(lease, result))
        if not self._waiting:
            self._waiting_since = asyncio.get_running_loop().time()
        self._waiting.append(pending)
        self._wake_claimer()
        self._answer_due(pending, wait)
        await pending.answered.wait()
        if pending.failure is not None:
            raise pending.failure
        if not pending.stored:
            raise StaleToken(f"job {lease.key!r}: token {lease.token} no longer holds the lease")

    def _answer_due(self, pending: PendingResult, wait: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        heapq.heappush(self._deadlines, (deadline, next(self._count), pending, wait))
        if deadline < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._timer_at = loop.call_at(deadline, self._overdue), deadline

    def _overdue(self) -> None:
        """Fail the results unanswered past their deadline; watch the next one."""
        self._timer, self._timer_at = None, math.inf
        loop = asyncio.get_running_loop()
        now, deadlines = loop.time(), self._deadlines
        while deadlines and (deadlines[0][2].answered.is_set() or deadlines[0][0] <= now):
            _, _, pending, wait = heapq.heappop(deadlines)
            _unanswered(pending, wait)
        if deadlines:
            self._timer_at = deadlines[0][0]
            self._timer = loop.call_at(self._timer_at, self._overdue)

    def take(self) -> list[PendingResult]:
        """The results waiting, for a claim to carry."""
        taken, self._waiting = self._waiting, []
        return taken

    def close(self, failure: StoreFailure) -> None:
        """No claim comes any more: the waiting results and later ones fail with
        `failure`."""
        self._closed = failure
        answer(self.take(), failure=failure)


def answer(results: Sequence[PendingResult], *, stored: Sequence[bool] = (),
           failure: StoreFailure | None = None) -> None:
    """What the claim that carried `results` did: `stored` each in order, or `failure`."""
    for n, pending in enumerate(results):
        pending.stored = n < len(stored) and stored[n]
        pending.failure = failure
        pending.answered.set()


def _unanswered(pending: PendingResult, wait: float) -> None:
    if not pending.answered.is_set():
        pending.failure = StoreUnavailable(f"no claim carried the result within {wait:g} s")
        pending.answered.set()
