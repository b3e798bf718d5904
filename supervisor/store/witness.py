"""What one supervisor process saw of its store failing, carried by its claims as
`since` (core/lease_losses.py): the store time at which its calls began to fail or go
unanswered.

Each store object keeps one: its claims and renewals tell it when they were sent,
when they failed, and the store time of their answers.  Local times are converted to
store times with the offset read from the last answer (its store time less the local
time it arrived, so a little early: by the call's return trip).  Until a first answer
there is no offset and no `since`: a supervisor that never heard from the store
witnessed nothing.  A failure that took longer than `max_wait` is left out: the store
gives up on a call after less, so this process itself was stalled (frozen, swapped)
and saw nothing of the store.

The failures are told by every claim sent until one is sent `hold` (a lease's ttl)
after the last failure, not only by the first claim that goes through: a lease whose
holder could not renew during the failure was fenced (its child killed, its release
refused), and may run out up to a lease's ttl after the store works again.  That
expiry is the failure's doing too.  (Found by the chaos run, `--overlap`, seed 42:
six long jobs were failed after five such losses.)
"""

from __future__ import annotations

from collections.abc import Callable


class FailureWitness:
    def __init__(self, clock: Callable[[], float], *, max_wait: float) -> None:
        self._clock = clock
        self._max_wait = max_wait
        self._offset: float | None = None  # store time - local time
        self._failing_since: float | None = None  # local send time of the oldest failure
        self._last_failure: float | None = None  # local send time of the newest failure

    def sending(self) -> float:
        """The local time a call is sent at, for `failed`, `answered` and `since`."""
        return self._clock()

    def store_time(self, local: float) -> float | None:
        """A local time on the store's clock, once an answer told the offset."""
        return None if self._offset is None else local + self._offset

    def since(self, sent_at: float) -> float | None:
        """For a claim sent at `sent_at`: the store time since which the store has
        failed or not answered this process."""
        if self._offset is None:
            return None
        oldest = sent_at if self._failing_since is None else min(self._failing_since, sent_at)
        return oldest + self._offset

    def failed(self, sent_at: float) -> None:
        if self._clock() - sent_at > self._max_wait:
            return
        if self._failing_since is None or sent_at < self._failing_since:
            self._failing_since = sent_at
        if self._last_failure is None or sent_at > self._last_failure:
            self._last_failure = sent_at

    def answered(self, sent_at: float, store_now: float, *, reported: bool,
                 hold: float = 0.0) -> None:
        """A call sent at `sent_at` went through at `store_now`; `reported`: it carried
        `since` (a claim), so the failures before it are told, and forgotten once it
        was sent `hold` seconds after the last of them."""
        self._offset = store_now - self._clock()
        if (reported and self._failing_since is not None and self._failing_since <= sent_at
                and self._last_failure is not None and sent_at - self._last_failure >= hold):
            self._failing_since = None
            self._last_failure = None
