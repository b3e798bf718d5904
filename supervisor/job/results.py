"""Results waiting for the next claim: a job's settle hands its result over and waits;
the claimer carries every waiting result in its next claim and answers each."""

from __future__ import annotations

import asyncio
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
        self._closed: StoreFailure | None = None

    @property
    def waiting(self) -> bool:
        return bool(self._waiting)

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
        self._waiting.append(pending)
        self._wake_claimer()
        timer = asyncio.get_running_loop().call_later(wait, _unanswered, pending, wait)
        try:
            await pending.answered.wait()
        finally:
            timer.cancel()
        if pending.failure is not None:
            raise pending.failure
        if not pending.stored:
            raise StaleToken(f"job {lease.key!r}: token {lease.token} no longer holds the lease")

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
