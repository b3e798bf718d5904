"""Settle: the last step of a job's way, storing the outcome of one attempt.

Each outcome is one call to the store under the attempt's lease (complete, fail,
release, snooze, finish_stopped), retried while the store fails and the lease may still be
held.  A result first goes with the claimer's next claim (`job/results.py`), which
stores it with the results of other jobs finished meanwhile and claims the work for the
freed slots in the same store call; if that claim fails or does not come within
`results.WITH_CLAIM_WAIT`, a plain complete follows.  A complete sent twice (after a
lost reply, or beside a claim that did carry it) finds its result stored under its own
lease and changes nothing (`Store.complete`).  The claim runs in the claimer's task:
a lost reply there loses no claimed job (`Store.claim`'s claim id).

An outcome the store does not take is tried again past the job's fence, for as long as
the store may still hold the lease (`core.leases.outcome_deadline`): the child is dead by
then, and a stale token changes nothing, but an outcome stored keeps the lease's later
end from counting as a loss of the job.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import anyio

from sandbox import protocol
from supervisor.core.leases import outcome_deadline
from supervisor.core.outcome import (
    Abandon,
    Complete,
    Fail,
    Outcome,
    Release,
    Snooze,
    Stopped,
    StopReason,
)
from supervisor.core.retry import backoff_delay
from supervisor.errors import StaleToken, StoreFailure
from supervisor.job.running import Registry, RunningJob
from supervisor.observe.metrics import metrics
from supervisor.observe.store_failures import StoreFailures
from supervisor.store.base import Store
from supervisor.store.records import Lease

MIN_OUTCOME_WAIT = 1.0

CompleteWithClaim = Callable[[Lease, bytes], Awaitable[None]]


class Settler:
    """Stores outcomes for every job of this supervisor, with one log of the store's
    failures (an outage is logged once, not once a job)."""

    def __init__(self, store: Store, registry: Registry, failures: StoreFailures, *,
                 lease_ttl: float, draining: anyio.Event,
                 with_claim: CompleteWithClaim | None = None) -> None:
        self._store = store
        self._registry = registry
        self.failures = failures
        self._lease_ttl = lease_ttl
        self._draining = draining
        self._with_claim = with_claim

    async def settle(self, job: RunningJob, outcome: Outcome) -> bool:
        """Store the outcome, retrying while the store fails and the lease may still be
        held.  After that the outcome is left to the store's recovery (False)."""
        self._registry.mark_finalizing(job)
        return await _settle(job, outcome, self._store, self.failures, self._with_claim,
                             lambda: outcome_deadline(job.fence_at, self._lease_ttl,
                                                      draining=self._draining.is_set()))


async def _settle(job: RunningJob, outcome: Outcome, store: Store, failures: StoreFailures,
                  with_claim: CompleteWithClaim | None, give_up_at: Callable[[], float]) -> bool:
    if with_claim is not None and isinstance(outcome, Complete) and not job.lease_lost:
        # A result's first try goes with the next claim, which answers within its own
        # wait (`results.WITH_CLAIM_WAIT`): no cancel scope for it.  If that claim fails
        # or does not come, the result is completed on its own below.
        try:
            await with_claim(job.lease, outcome.result_json)
        except StaleToken:
            job.log.warning("lease lost; outcome not stored")
            return True
        except StoreFailure:
            pass
        else:
            _succeeded(job)
            failures.succeeded()
            return True
    while True:
        if job.lease_lost and not isinstance(outcome, Abandon):
            outcome = Abandon("lease lost before the outcome was stored")
        try:
            # A store that does not answer gets until the fence, and a second at least.
            with anyio.fail_after(max(MIN_OUTCOME_WAIT, job.fence_at - protocol.fence_clock())):
                await _store_outcome(job, outcome, store)
            failures.succeeded()
            return True
        except StaleToken:
            job.log.warning("lease lost; outcome not stored")
            return True
        except (StoreFailure, TimeoutError) as error:
            delay = failures.failed(error)
            if protocol.fence_clock() + delay >= give_up_at():
                job.log.warning("outcome not stored, left to the store's recovery once the "
                                "lease expires: %s", str(error) or "no answer")
                return False
            await anyio.sleep(delay)


def _succeeded(job: RunningJob) -> None:
    metrics.outcomes.labels("succeeded", "").inc()
    job.log.info("succeeded")


async def _store_outcome(job: RunningJob, outcome: Outcome, store: Store) -> None:
    lease = job.lease
    match outcome:
        case Complete(result_json):
            await store.complete(lease, result_json)
            _succeeded(job)
        case Fail(error, final):
            delay = backoff_delay(job.claimed.attempt, random.random())
            final = final or job.claimed.attempt >= job.max_attempts
            state = await store.fail(lease, error, final=final, retry_delay=delay)
            kind = {"pending": "retried", "failed": "failed"}.get(state, state)
            metrics.outcomes.labels(kind, outcome.cause).inc()
            if state == "pending":
                job.log.info("attempt %d failed, retry in %.1f s: %s",
                             job.claimed.attempt, delay, error)
            else:
                job.log.info("%s: %s", state, error)
        case Release(why, delay):
            move = job.move if job.stop_reason is StopReason.REBALANCE else None
            if move is None:
                await store.release(lease, delay=delay, reason=why)
                job.log.info("released: %s", why)
            else:
                await store.release(lease, reserve_for=move.target, reserve_ttl=move.reserve_ttl,
                                    reason=why)
                job.log.info("released for %s", move.target)
            metrics.outcomes.labels("released", "").inc()
        case Snooze(delay):
            state = await store.snooze(lease, delay)
            metrics.outcomes.labels("snoozed" if state == "pending" else state, "").inc()
            if state == "pending":
                job.log.info("snoozed for %g s", delay)
            else:
                job.log.info("%s: a stop was asked for before the snooze", state)
        case Stopped(why):
            await store.finish_stopped(lease, why)
            metrics.outcomes.labels("stopped", "").inc()
            job.log.info("stopped")
        case Abandon(why):
            metrics.outcomes.labels("abandoned", "").inc()
            job.log.warning("abandoned: %s", why)
