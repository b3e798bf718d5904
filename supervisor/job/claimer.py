"""Claim work whenever there is room: woken by store events, freed slots, or a poll.

A claim also stores the results of the jobs that finished since the last one (their
settle hands them over, `job/results.py`): one store call for them all and the jobs
that take their slots.  A claim sent again after its reply was lost carries none, so a replayed
answer never speaks for results it did not store.  While the last claim left room, the
store wakes the claimer when there is work (core/claiming.py): results that come
meanwhile are stored on their own, without a claim's fixed part."""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass

import anyio
import anyio.abc

from sandbox.protocol import fence_clock
from supervisor.core.claiming import ClaimView, claim_now, next_look, settle_due
from supervisor.core.leases import MAX_LEASE_LOSSES
from supervisor.core.limits import Limits
from supervisor.doorbell import Doorbell
from supervisor.errors import StoreFailure, StoreUnavailable
from supervisor.job.results import PendingResult, PendingResults, answer
from supervisor.job.running import Registry
from supervisor.observe.job_log import JobLog
from supervisor.observe.metrics import metrics
from supervisor.observe.store_failures import StoreFailures
from supervisor.store.base import Store
from supervisor.store.policy import JUDGE_AFTER_GAP
from supervisor.store.records import ClaimedJob, LeaseRecovery

log = logging.getLogger("poolsup.claimer")

POLL_INTERVAL = 0.5  # also how often expired leases of the pool are recovered
CLAIM_RETRY_CAP = JUDGE_AFTER_GAP / 2  # a failing store is tried again this soon at most


class Claimer:
    def __init__(
        self,
        *,
        store: Store,
        registry: Registry,
        owner: str,
        handlers: Sequence[str],
        limits: Mapping[str, Limits],
        capacity: int,
        lease_ttl: float,
        start_job: Callable[[ClaimedJob, float], None],
        spawn_ready: Callable[[], Awaitable[None]],
        spawn_possible: Callable[[], bool],
        wakeup: Doorbell,
        failures: StoreFailures,
        results: PendingResults,
    ) -> None:
        self._store = store
        self._registry = registry
        self._owner = owner
        self.handlers = list(handlers)
        self.limits = dict(limits)  # pool-wide, enforced by the store; replaced by a reload
        self._capacity = capacity
        self._lease_ttl = lease_ttl
        self._start_job = start_job
        self._spawn_ready = spawn_ready
        self._spawn_possible = spawn_possible
        self._last_claim = -math.inf
        self._next_look = -math.inf
        self._recover_at = -math.inf  # the pool's expired leases: once a poll interval
        self._waiting_for_work = False  # the last claim left room (core/claiming.py)
        self._woken = True  # by the store, since the last claim
        self._wakeup = wakeup  # store events, freed slots, results
        self._results = results
        self.failures = failures
        self.stopped = False
        # One random part per claimer, not per claim (each uuid4 reads the kernel's
        # random source): the count makes each id of this claimer unique.
        claimer_id = uuid.uuid4().hex
        self._claim_ids = (f"{claimer_id}:{n}" for n in itertools.count())
        # Store calls in flight at once, as many as pay on this store: a slot freed while
        # a claim is on its way is then claimed for at once, not after its answer.
        self._lanes = [Lane(number, next(self._claim_ids))
                       for number in range(store.claim_lanes)]
        self._promised = 0  # free slots that the claims in flight are filling
        self._retry_at = -math.inf  # after a failed call, none before this
        self._held_until: float | None = None

    def wake(self) -> None:
        """The store rang: there may be work."""
        self._woken = True
        self._wakeup.ring()

    def stop(self) -> None:
        self.stopped = True
        self.wake()
        self._results.close(StoreUnavailable("the claimer stopped"))

    async def run(self) -> None:
        async with anyio.create_task_group() as calls:
            while not self.stopped:
                # No claim while no fork server could start it: a claim would only be
                # released again.
                await self._spawn_ready()
                now = _now()
                lane = self._idle_lane()
                if lane is None:
                    await self._wakeup.wait()  # rung as each call ends
                    continue
                if now < self._retry_at:
                    await self._sleep(self._retry_at - now)
                    continue
                free = self._free_slots()
                view = ClaimView(free_slots=free, now=now, next_look=self._next_look,
                                 waiting_for_work=self._waiting_for_work, woken=self._woken)
                if claim_now(view):
                    recover = now >= self._recover_at
                    if recover:
                        self._recover_at = now + POLL_INTERVAL
                    self._send(calls, lane, self._claim(lane, free, recover))
                    self._promised += free
                    # The next poll counts from this claim's sending.
                    self._last_claim, self._next_look = now, now + POLL_INTERVAL
                    self._woken = False
                elif (settle_at := settle_due(self._results.waiting_since, now)) <= now:
                    self._send(calls, lane, self._settle(self._results.take()))
                else:
                    await self._sleep(min(settle_at, self._next_look) - now)

    def _idle_lane(self) -> Lane | None:
        """An idle lane, one whose claim is to be sent again first."""
        idle = [lane for lane in self._lanes if not lane.busy]
        return min(idle, key=lambda lane: lane.first_sent_at is None, default=None)

    def _send(self, calls: anyio.abc.TaskGroup, lane: Lane,
              call: Coroutine[None, None, None]) -> None:
        """Run one store call in `lane`; a failure holds every call back a while."""
        lane.busy = True

        async def in_lane() -> None:
            try:
                await call
            except StoreFailure as error:
                # At most a second: after an outage, the leases it ended wait for the
                # claim of a supervisor that saw it (core/lease_losses.py judged_later).
                self._retry_at = _now() + min(CLAIM_RETRY_CAP, self.failures.failed(error))
            finally:
                lane.busy = False
                self._wakeup.ring()

        calls.start_soon(in_lane)

    def _free_slots(self) -> int:
        if self.stopped or not self._spawn_possible():
            return 0
        return max(0, self._capacity - self._registry.busy_slots - self._promised)

    async def _claim(self, lane: Lane, free: int, recover: bool) -> None:
        """One claim for `free` slots, which it counts as taken until it is answered."""
        try:
            await self._claim_for(lane, free, recover)
        except StoreFailure:
            if recover:
                self._recover_at = -math.inf  # the next claim recovers instead
            raise
        finally:
            self._promised -= free

    async def _claim_for(self, lane: Lane, free: int, recover: bool) -> None:
        sent_at = fence_clock()
        carried: list[PendingResult] = []
        if lane.first_sent_at is None:  # not sent again: it may carry results
            lane.first_sent_at = sent_at
            carried = self._results.take()
        try:
            batch = await self._store.claim(
                self._owner, self.handlers, free, self._lease_ttl, MAX_LEASE_LOSSES,
                completing=[result.completion for result in carried],
                claim_id=lane.claim_id, limits=self.limits, lane=lane.number,
                recover=recover)
        except StoreFailure as error:
            answer(carried, failure=error)
            raise
        answer(carried, stored=batch.completed)
        if batch.replayed:
            sent_at = lane.first_sent_at
        lane.claim_id, lane.first_sent_at = next(self._claim_ids), None
        self.failures.succeeded()
        self._next_look = min(self._next_look,
                              next_look(_now(), POLL_INTERVAL, batch.next_due_in))
        # A job a pool-wide limit held back rings no one when the limit frees.
        self._waiting_for_work = (len(batch.jobs) < free and batch.held_until is None
                                  and not batch.replayed and not self.limits)
        self._note_hold(batch.held_until)
        metrics.claims.inc(len(batch.jobs))
        if batch.recovered:
            metrics.recovered.inc(batch.recovered)
        for recovered in batch.recoveries:
            _log_recovery(recovered)
        if batch.left_to_witness:
            log.info("left %d expired lease(s) to a supervisor that saw the store's "
                     "gap", batch.left_to_witness)
        for claimed in batch.jobs:
            if claimed.lease_expired_at is not None:
                # The attempt started at the claim's store time: deadline - ttl.
                started_at = claimed.lease_deadline - self._lease_ttl
                metrics.failover.observe(started_at - claimed.lease_expired_at)
            self._start_job(claimed, sent_at)

    async def _settle(self, carried: list[PendingResult]) -> None:
        """Store the results `carried`, and nothing else."""
        try:
            batch = await self._store.claim(
                self._owner, self.handlers, 0, self._lease_ttl, MAX_LEASE_LOSSES,
                completing=[result.completion for result in carried],
                limits=self.limits, only_completing=True)
        except StoreFailure as error:
            answer(carried, failure=error)
            raise
        answer(carried, stored=batch.completed)
        self.failures.succeeded()

    def _note_hold(self, held_until: float | None) -> None:
        """Say once when claims start and stop being held after the store's master
        changed (core/failover.py)."""
        if held_until is not None and self._held_until != held_until:
            log.warning("the store's master changed: no job starts until store time %.1f, "
                        "when every lease the old master may have granted has run out",
                        held_until)
        elif held_until is None and self._held_until is not None:
            log.info("claims go on after the store's master changed")
        self._held_until = held_until
        metrics.failover_held.set(0 if held_until is None else 1)

    async def _sleep(self, seconds: float) -> None:
        """Until a wake-up, or `seconds`: a timer that rings the doorbell, not a cancel
        scope (one per claim, some thirty calls each)."""
        timer = asyncio.get_running_loop().call_later(seconds, self._wakeup.ring)
        try:
            await self._wakeup.wait()
        finally:
            timer.cancel()


@dataclass(eq=False)
class Lane:
    """One store call at a time (a claim or a settle).  A claim whose reply was lost is
    sent again in its lane under its id, kept until a claim under it is answered, and
    its jobs are fenced from the first sending: their leases started no earlier."""

    number: int
    claim_id: str
    first_sent_at: float | None = None
    busy: bool = False


def _log_recovery(recovered: LeaseRecovery) -> None:
    """One line per expired lease, saying whether it counted as a loss of its job."""
    why = (f"lease loss {recovered.losses} in a row" if recovered.counted else
           f"not counted (the store failed over its end; {recovered.losses} in a row)")
    JobLog(log, recovered.key).log(logging.WARNING if recovered.counted else logging.INFO,
                                   "lease of %s expired: %s; %s", recovered.holder, why,
                                   recovered.outcome)


def _now() -> float:
    """anyio.current_time() on asyncio (the loop's clock), without looking the backend up
    through sniffio at each claim."""
    return asyncio.get_running_loop().time()
