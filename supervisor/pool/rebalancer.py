"""Shed this supervisor's excess of movable jobs to members under their share.

Every few seconds: read the members' load, plan (core/rebalance.py), and if the same
moves for this member come out of two reads in a row, ask those children to stop with
the reason "rebalance".  Each run releases its job reserved for its target once its
processes are gone (job/runner.py), so the target claims it and nobody else does.  No new
plan is made while a move of ours is under way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio

from sandbox.protocol import fence_clock
from supervisor.core.outcome import StopReason
from supervisor.core.rebalance import (
    Candidate,
    Move,
    first_seen_times,
    pick_jobs,
    plan_moves,
    settled,
)
from supervisor.errors import StoreFailure
from supervisor.job.running import MoveOrder, Registry, RunningJob
from supervisor.observe.job_log import JobLog
from supervisor.observe.metrics import metrics
from supervisor.pool.loads import member_load, takes_work
from supervisor.store.base import Store
from supervisor.store.policy import LOSSES_RESET_TTLS
from supervisor.store.records import SupervisorStatus

log = logging.getLogger("poolsup.rebalance")


def rebalance_interval(lease_ttl: float) -> float:
    return min(2.0, max(0.5, lease_ttl / 4))


def settle_time(lease_ttl: float) -> float:
    """How long a member must be seen without a break before it is sent work."""
    return max(2.0, lease_ttl)


def reservation_time(lease_ttl: float) -> float:
    """How long a moved job waits for its target alone (the target is woken at once)."""
    return max(2.0, lease_ttl)


def losses_reset_after(lease_ttl: float) -> float:
    """How long a job runs here before the store has reset its count of lease losses
    in a row: LOSSES_RESET_TTLS lease ttls, and the renewal after them."""
    return (LOSSES_RESET_TTLS + 1) * lease_ttl


class Rebalancer:
    def __init__(
        self, *, store: Store, registry: Registry, owner: str, lease_ttl: float
    ) -> None:
        self._store = store
        self._registry = registry
        self._owner = owner
        self._lease_ttl = lease_ttl
        self._first_seen: dict[tuple[str, str], float] = {}  # (id, instance) -> fence clock
        self._last_plan: list[Move] = []
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True

    async def run(self) -> None:
        interval = rebalance_interval(self._lease_ttl)
        while not self.stopped:
            await anyio.sleep(interval)
            if self.stopped or self._moves_under_way():
                self._last_plan = []
                continue
            try:
                membership = await self._store.members()
            except StoreFailure:
                self._last_plan = []  # the claimer and lease keeper report store failures
                continue
            self._check(membership.members)

    def _moves_under_way(self) -> bool:
        return any(job.stop_reason is StopReason.REBALANCE for job in self._registry)

    def _check(self, statuses: Sequence[SupervisorStatus]) -> None:
        now = fence_clock()
        self._first_seen = first_seen_times(
            self._first_seen, [(s.info.id, s.info.instance) for s in statuses if takes_work(s)],
            now)
        settle = settle_time(self._lease_ttl)
        loads = [
            member_load(s, eligible=takes_work(s) and settled(
                self._first_seen.get((s.info.id, s.info.instance)), now, settle))
            for s in statuses
        ]
        plan = [move for move in plan_moves(loads) if move.source == self._owner]
        confirmed = plan and plan == self._last_plan
        self._last_plan = plan
        if confirmed:
            self._last_plan = []
            self._start(plan, {load.id: load.handlers for load in loads})

    def _start(self, plan: Sequence[Move], handlers: dict[str, frozenset[str]]) -> None:
        jobs = {job.key: job for job in self._movable_jobs()}
        now = fence_clock()
        candidates = [Candidate(key=job.key, handler=job.handler.name,
                                runtime=now - job.claimed_at,
                                after_lease_loss=job.claimed.lease_expired_at is not None)
                      for job in jobs.values()]
        targets = [(move.target, handlers.get(move.target, frozenset())) for move in plan]
        for key, target in pick_jobs(candidates, targets,
                                     losses_reset_after=losses_reset_after(self._lease_ttl)):
            job = jobs[key]
            JobLog(log, key, job.token).info("moving to %s", target)
            job.move_to(MoveOrder(target, reservation_time(self._lease_ttl)))
            metrics.moves.inc()

    def _movable_jobs(self) -> list[RunningJob]:
        return [job for job in self._registry
                if job.handler.rebalance and job.stop_reason is None and not job.finalizing]
