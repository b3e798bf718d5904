"""Fire the pool's schedules: every supervisor watches them, the store lets one fire a tick.

Each round reads the schedules' records (one read, with the store's time), asks the
core which tick is due for each schedule (`core.ticks.decide_tick`), and asks the store
to fire it (`Store.fire_tick`, one atomic step that also dispatches a handler
schedule's job).  The store refuses a tick that another supervisor fired first, or one
that its own clock says is not due yet, so a tick fires once in the whole pool
whichever supervisors are alive.  A producer's tick is then run here, in a sandboxed
child, and its plan applied; its outcome is recorded on the tick.

A producer's tick is never left "fired" with nothing recorded: a stop lets producers
run on while the supervisor drains, and one cancelled before its outcome is recorded
gives its tick back ("released") for another supervisor to fire again.  A tick still
"fired" long past its producer's timeout (its supervisor died) is given back by
whichever supervisor sees it first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import anyio
import anyio.abc
import orjson

from supervisor.cadence import tick_label
from supervisor.config import HandlerConfig, ScheduleConfig
from supervisor.core.plans import InvalidPlan, parse_plan
from supervisor.core.ticks import (
    Fire,
    Standing,
    Wait,
    decide_again,
    decide_tick,
    fingerprint,
    standing,
    tick_abandoned,
)
from supervisor.doorbell import Doorbell
from supervisor.errors import PoolsupError, StaleTick, StoreFailure
from supervisor.forks.fork_client import ForkServerClient
from supervisor.observe.metrics import metrics
from supervisor.observe.store_failures import StoreFailures
from supervisor.pool.plan_apply import apply_plan
from supervisor.pool.producers import ProducerFailed, run_producer
from supervisor.store.base import Store
from supervisor.store.records import (
    RELEASED,
    DispatchRequest,
    FiredTick,
    ScheduleRecord,
    TickRequest,
    TickResult,
)

log = logging.getLogger("poolsup.schedules")

# The longest sleep between two reads of the schedules, so that a stepped store clock
# or a changed record is noticed.
MAX_WAIT = 10.0
MIN_WAIT = 0.01
EARLY_RETRY = 0.05  # our estimate of the store's clock ran ahead of it
OUTCOME_TRIES = 3
# Decisions again at once after a "stale" refusal (another supervisor fired a tick
# since the read); past them, the next round reads the record again.
STALE_TRIES = 3
# A producer cancelled mid-plan has this long to give its tick back.
RELEASE_GRACE = 5.0
# A producer's tick still without an outcome this long after its producer's timeout
# was abandoned (its supervisor died or lost the store): given back by another.
ABANDON_GRACE = 120.0


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
        self._wakeup = Doorbell()  # stops and reloads
        self.failures = StoreFailures("schedules")
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True
        self._wakeup.ring()

    def reload(self, schedules: Mapping[str, ScheduleConfig],
               handlers: Mapping[str, HandlerConfig]) -> None:
        self.schedules = dict(schedules)
        self.handlers = dict(handlers)
        self._wakeup.ring()

    async def run(self) -> None:
        # Once stopped, producers already running go on (each bounded by its timeout)
        # until the daemon's drain ends; one cancelled then gives its tick back.
        async with anyio.create_task_group() as producers:
            while not self.stopped:
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

    async def _round(self, producers: anyio.abc.TaskGroup) -> float:
        """Fire what is due; seconds until the next tick may be."""
        book = await self._store.schedules()
        records = {record.name: record for record in book.schedules}
        now = book.store_time
        wait = MAX_WAIT
        for schedule in list(self.schedules.values()):
            if self.stopped:
                break
            record = records.get(schedule.name)
            state = Standing.RUNNING if record is None else standing(
                ended=record.ended_at is not None, ended_fingerprint=record.fingerprint,
                fingerprint=fingerprint(schedule.settings))
            if state is Standing.ENDED:
                continue
            if record is not None and schedule.name not in self._producing and tick_abandoned(
                    outcome=record.outcome, fired_at=record.fired_at, timeout=schedule.timeout,
                    grace=ABANDON_GRACE, now=now):
                record = await self._give_back_abandoned(record)
            basis = record.last_tick if record else None
            decision = decide_tick(
                schedule.cadence, name=schedule.name, jitter=schedule.jitter,
                last_tick=basis,
                released=record is not None and record.outcome == RELEASED, now=now,
                restarted=state is Standing.RESTARTED)
            if isinstance(decision, Wait):
                wait = min(wait, decision.until - now)
                continue
            after = decide_tick(schedule.cadence, name=schedule.name, jitter=schedule.jitter,
                                last_tick=decision.tick, now=now)
            if isinstance(after, Wait):
                wait = min(wait, after.until - now)
            if schedule.name in self._producing:
                continue  # our producer of an earlier tick still runs; another may fire it
            result = await self._fire(schedule, decision, basis)
            for _ in range(STALE_TRIES):
                if result.outcome != "stale":
                    break
                # Another supervisor fired a tick since our read: decide again at once
                # from it, so the tick still fires, with the missed ticks counted once.
                basis = result.last_tick
                again = decide_again(schedule.cadence, name=schedule.name,
                                     jitter=schedule.jitter, refused=decision.tick,
                                     last_tick=basis, now=result.store_time)
                if isinstance(again, Wait):
                    wait = min(wait, again.until - now)
                    break
                decision = again
                result = await self._fire(schedule, decision, basis)
            if result.outcome in ("early", "stale"):
                wait = min(wait, EARLY_RETRY)
            elif result.outcome == "fired":
                self._producing.add(schedule.name)
                fired = FiredTick(schedule=schedule.name, tick=decision.tick, owner=self._owner)
                producers.start_soon(self._produce, schedule, fired,
                                     name=f"producer {schedule.name}")
        return wait

    async def _give_back_abandoned(self, record: ScheduleRecord) -> ScheduleRecord:
        """Give back a producer's tick whose supervisor never recorded its outcome; the
        record as it is then."""
        if record.last_tick is None or record.fired_by is None:
            return record
        fired = FiredTick(schedule=record.name, tick=record.last_tick, owner=record.fired_by)
        error = f"abandoned: {record.fired_by} recorded no outcome; fired again"
        if not await self._store.record_tick_outcome(fired, RELEASED,
                                                     orjson.dumps({"error": error})):
            return record  # its outcome came meanwhile; the next round reads it
        log.warning("schedule %s: tick %s %s", record.name, tick_label(record.last_tick), error)
        metrics.schedule_ticks.labels(record.name, RELEASED).inc()
        return replace(record, outcome=RELEASED)

    async def _fire(self, schedule: ScheduleConfig, decision: Fire,
                    basis: float | None) -> TickResult:
        """Ask the store to fire the decided tick; `basis`: the last tick its missed
        ticks were counted from."""
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
            basis=basis,
        ))
        if result.outcome in ("dispatched", "skipped", "fired"):
            metrics.schedule_ticks.labels(schedule.name, result.outcome).inc()
            missed = f", {decision.missed} missed tick(s) recorded" if decision.missed else ""
            target = f" {dispatch.key}" if dispatch is not None else ""
            log.info("schedule %s: tick %s %s%s%s", schedule.name, tick_label(decision.tick),
                     result.outcome, target, missed)
        return result

    async def _produce(self, schedule: ScheduleConfig, fired: FiredTick) -> None:
        try:
            outcome, detail, end = await self._plan_and_apply(schedule, fired)
            self._report(fired, outcome, detail, end=end)
            if outcome != "stale":  # a newer tick's record is not this one's to write
                await self._record(fired, outcome, detail, end=end)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True) as scope:
                scope.deadline = anyio.current_time() + RELEASE_GRACE
                await self._give_back(fired)
            raise
        finally:
            self._producing.discard(schedule.name)

    def _report(self, fired: FiredTick, outcome: str, detail: dict[str, Any], *,
                end: bool = False) -> None:
        metrics.schedule_ticks.labels(fired.schedule, outcome).inc()
        label = tick_label(fired.tick)
        if outcome == "stale":
            log.warning("schedule %s: tick %s: %s", fired.schedule, label, detail["error"])
        elif outcome == "error":
            log.error("schedule %s: tick %s: %s; nothing changed", fired.schedule, label,
                      detail)
        else:
            log.info("schedule %s: tick %s plan applied: %s%s", fired.schedule, label,
                     ", ".join(f"{count} {what}" for what, count in detail.items()),
                     "; the schedule ends" if end else "")

    async def _record(self, fired: FiredTick, outcome: str, detail: dict[str, Any], *,
                      end: bool = False) -> None:
        """The tick's outcome; with `end`, the end of its schedule in the same step."""
        for attempt in range(1, OUTCOME_TRIES + 1):
            try:
                recorded = await self._store.record_tick_outcome(
                    fired, outcome, orjson.dumps(detail), end=end)
                if end and recorded:
                    log.info("schedule %s: ended by its tick %s; it fires again once its "
                             "definition changes", fired.schedule, tick_label(fired.tick))
                return
            except StoreFailure as error:
                if attempt == OUTCOME_TRIES:
                    log.warning("schedule %s: outcome of tick %s not recorded (%s); another "
                                "supervisor gives the tick back once it is abandoned",
                                fired.schedule, tick_label(fired.tick), error)
                    return
                await anyio.sleep(self.failures.failed(error))

    async def _give_back(self, fired: FiredTick) -> None:
        """This supervisor stops before the tick's outcome is recorded: give the tick
        back, so that another supervisor fires it again."""
        error = "the supervisor stopped before the plan was applied; fired again elsewhere"
        try:
            released = await self._store.record_tick_outcome(
                fired, RELEASED, orjson.dumps({"error": error}))
        except StoreFailure as failure:
            log.warning("schedule %s: tick %s could not be given back (%s); another "
                        "supervisor will once it is abandoned", fired.schedule,
                        tick_label(fired.tick), failure)
            return
        if released:
            metrics.schedule_ticks.labels(fired.schedule, RELEASED).inc()
            log.info("schedule %s: tick %s given back: %s", fired.schedule,
                     tick_label(fired.tick), error)

    async def _plan_and_apply(
        self, schedule: ScheduleConfig, fired: FiredTick
    ) -> tuple[str, dict[str, Any], bool]:
        """The tick's outcome and detail, and whether it ends the schedule: a plan with
        "end_schedule" that was applied whole (a plan refused, stale or partly applied
        ends nothing)."""
        try:
            value = await run_producer(self._fork_server(), schedule, tick=fired.tick,
                                       max_result=self._max_result)
            plan = parse_plan(value, handlers=self.handlers, max_payload=self._max_payload)
        except (ProducerFailed, InvalidPlan) as error:
            return "error", {"error": str(error)}, False
        except PoolsupError as error:  # no fork server to run it in, for one
            return "error", {"error": f"producer could not run: {error}"}, False
        try:
            counts = await apply_plan(self._store, fired, plan, max_attempts=self._max_attempts)
        except StaleTick as error:
            return "stale", {"error": f"a newer tick fired meanwhile; the rest of this "
                                      f"plan is not applied ({error})"}, False
        except StoreFailure as error:
            return "error", {"error": f"plan partly applied, the store failed: {error}"}, False
        return "applied", counts, plan.end_schedule

    def _max_attempts(self, handler: str) -> int:
        known = self.handlers.get(handler)
        return known.max_attempts if known else 0
