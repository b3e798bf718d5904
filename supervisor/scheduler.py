"""Fire the pool's schedules: every supervisor watches them, the store lets one fire a tick.

Each round reads the schedules' records (one read, with the store's time), asks the
core which tick is due for each schedule (`core.ticks.decide_tick`), and asks the store
to fire it (`Store.fire_tick`, one atomic step that also dispatches a handler
schedule's job).  The store refuses a tick that another supervisor fired first, or one
that its own clock says is not due yet, so a tick fires once in the whole pool
whichever supervisors are alive.  A producer's tick is then run here, in a sandboxed
child, and its plan applied; its outcome is recorded on the tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import anyio.abc
import orjson

from supervisor.cadence import tick_label
from supervisor.children import ForkServerClient
from supervisor.config import HandlerConfig, ScheduleConfig
from supervisor.core.plans import InvalidPlan, parse_plan
from supervisor.core.ticks import Fire, Wait, decide_tick, fingerprint
from supervisor.errors import PoolsupError, StoreFailure
from supervisor.metrics import metrics
from supervisor.plan_apply import apply_plan
from supervisor.producers import ProducerFailed, run_producer
from supervisor.store.base import DispatchRequest, Store, TickRequest, TickResult
from supervisor.store_failures import StoreFailures

log = logging.getLogger("poolsup.schedules")

# The longest sleep between two reads of the schedules, so that a stepped store clock
# or a changed record is noticed.
MAX_WAIT = 10.0
MIN_WAIT = 0.01
EARLY_RETRY = 0.05  # our estimate of the store's clock ran ahead of it
OUTCOME_TRIES = 3


def job_key(schedule: ScheduleConfig, tick: float) -> str:
    return schedule.key.replace("{tick}", tick_label(tick))


class Scheduler:
    def __init__(
        self,
        *,
        store: Store,
        owner: str,
        schedules: Mapping[str, ScheduleConfig],
        handlers: Mapping[str, HandlerConfig],
        fork_server: Callable[[], ForkServerClient],
        max_payload: int,
        max_result: int,
    ) -> None:
        self._store = store
        self._owner = owner
        self.schedules = dict(schedules)
        self.handlers = dict(handlers)
        self._fork_server = fork_server
        self._max_payload = max_payload
        self._max_result = max_result
        self._producing: set[str] = set()
        self._wakeup = anyio.Event()
        self.failures = StoreFailures("schedules")
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True
        self._wakeup.set()

    def reload(self, schedules: Mapping[str, ScheduleConfig],
               handlers: Mapping[str, HandlerConfig]) -> None:
        self.schedules = dict(schedules)
        self.handlers = dict(handlers)
        self._wakeup.set()

    async def run(self) -> None:
        async with anyio.create_task_group() as producers:
            while not self.stopped:
                self._wakeup = anyio.Event()
                if not self.schedules:
                    await self._wakeup.wait()  # until a reload brings some
                    continue
                try:
                    wait = await self._round(producers)
                except StoreFailure as error:
                    with anyio.move_on_after(self.failures.failed(error)):
                        await self._wakeup.wait()
                    continue
                self.failures.succeeded()
                with anyio.move_on_after(max(MIN_WAIT, wait)):
                    await self._wakeup.wait()
            producers.cancel_scope.cancel()

    async def _round(self, producers: anyio.abc.TaskGroup) -> float:
        """Fire what is due; seconds until the next tick may be."""
        book = await self._store.schedules()
        last_ticks = {record.name: record.last_tick for record in book.schedules}
        now = book.store_time
        wait = MAX_WAIT
        for schedule in list(self.schedules.values()):
            if self.stopped:
                break
            decision = decide_tick(schedule.cadence, name=schedule.name, jitter=schedule.jitter,
                                   last_tick=last_ticks.get(schedule.name), now=now)
            if isinstance(decision, Wait):
                wait = min(wait, decision.until - now)
                continue
            after = decide_tick(schedule.cadence, name=schedule.name, jitter=schedule.jitter,
                                last_tick=decision.tick, now=now)
            if isinstance(after, Wait):
                wait = min(wait, after.until - now)
            if schedule.name in self._producing:
                continue  # our producer of an earlier tick still runs; another may fire it
            result = await self._fire(schedule, decision)
            if result.outcome == "early":
                wait = min(wait, EARLY_RETRY)
            elif result.outcome == "fired":
                self._producing.add(schedule.name)
                producers.start_soon(self._produce, schedule, decision.tick,
                                     name=f"producer {schedule.name}")
        return wait

    async def _fire(self, schedule: ScheduleConfig, decision: Fire) -> TickResult:
        dispatch = None
        if schedule.handler is not None:
            handler = self.handlers.get(schedule.handler)
            dispatch = DispatchRequest(
                key=job_key(schedule, decision.tick),
                handler=schedule.handler,
                payload=orjson.dumps(schedule.payload),
                max_attempts=handler.max_attempts if handler else 0,
                schedule=schedule.name,
            )
        result = await self._store.fire_tick(TickRequest(
            schedule=schedule.name,
            tick=decision.tick,
            not_before=decision.not_before,
            fingerprint=fingerprint(schedule.settings),
            owner=self._owner,
            missed=decision.missed,
            dispatch=dispatch,
        ))
        if result.outcome in ("dispatched", "skipped", "fired"):
            metrics.schedule_ticks.labels(schedule.name, result.outcome).inc()
            missed = f", {decision.missed} missed tick(s) recorded" if decision.missed else ""
            target = f" {dispatch.key}" if dispatch is not None else ""
            log.info("schedule %s: tick %s %s%s%s", schedule.name, tick_label(decision.tick),
                     result.outcome, target, missed)
        return result

    async def _produce(self, schedule: ScheduleConfig, tick: float) -> None:
        try:
            outcome, detail = await self._plan_and_apply(schedule, tick)
        finally:
            self._producing.discard(schedule.name)
        metrics.schedule_ticks.labels(schedule.name, outcome).inc()
        if outcome == "error":
            log.error("schedule %s: tick %s: %s; nothing changed", schedule.name,
                      tick_label(tick), detail)
        else:
            log.info("schedule %s: tick %s plan applied: %s", schedule.name, tick_label(tick),
                     ", ".join(f"{count} {what}" for what, count in detail.items()))
        for attempt in range(1, OUTCOME_TRIES + 1):
            try:
                await self._store.record_tick_outcome(schedule.name, tick, outcome,
                                                      orjson.dumps(detail))
                return
            except StoreFailure as error:
                if attempt == OUTCOME_TRIES:
                    log.warning("schedule %s: outcome of tick %s not recorded: %s",
                                schedule.name, tick_label(tick), error)
                    return
                await anyio.sleep(self.failures.failed(error))

    async def _plan_and_apply(
        self, schedule: ScheduleConfig, tick: float
    ) -> tuple[str, dict[str, Any]]:
        try:
            value = await run_producer(self._fork_server(), schedule, tick=tick,
                                       max_result=self._max_result)
            plan = parse_plan(value, handlers=self.handlers, max_payload=self._max_payload)
        except (ProducerFailed, InvalidPlan) as error:
            return "error", {"error": str(error)}
        except PoolsupError as error:  # no fork server to run it in, for one
            return "error", {"error": f"producer could not run: {error}"}
        try:
            counts = await apply_plan(self._store, schedule.name, plan,
                                      max_attempts=self._max_attempts)
        except StoreFailure as error:
            return "error", {"error": f"plan partly applied, the store failed: {error}"}
        return "applied", counts

    def _max_attempts(self, handler: str) -> int:
        known = self.handlers.get(handler)
        return known.max_attempts if known else 0
