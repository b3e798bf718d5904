"""A producer's plan: what it returned, checked, and what applying it would change.

A producer returns `{"start": [{"key", "handler", "payload"}, ...], "stop": [keys],
"stop_others": bool, "end_schedule": bool}`.  A plan that is not exactly that is refused
as a whole, so a producer that returns garbage changes nothing.  "end_schedule": the
schedule fires no more ticks once this plan is applied (a producer that raises
`sandbox.EndSchedule` returns `{"end_schedule": true}`: an empty plan that ends it).
"""

from __future__ import annotations

from collections.abc import Collection, Set
from dataclasses import dataclass
from typing import Any

import orjson

from supervisor.core.validation import validate_key, validate_payload_size
from supervisor.errors import InvalidJob

PLAN_KEYS = frozenset({"start", "stop", "stop_others", "end_schedule"})
START_KEYS = frozenset({"key", "handler", "payload"})


class InvalidPlan(Exception):
    """The producer's return value is not a plan; the message says where."""


@dataclass(frozen=True, kw_only=True)
class PlannedJob:
    key: str
    handler: str
    payload: bytes  # JSON text


@dataclass(frozen=True, kw_only=True)
class Plan:
    start: tuple[PlannedJob, ...] = ()
    stop: tuple[str, ...] = ()
    stop_others: bool = False
    end_schedule: bool = False


@dataclass(frozen=True, kw_only=True)
class PlanDiff:
    """What applying a plan to the live jobs would do."""

    start: tuple[PlannedJob, ...]  # not live: dispatched
    keep: tuple[str, ...]  # planned and already live: left alone
    stop: tuple[str, ...]  # live and named in `stop`, or the schedule's own not planned


def parse_plan(value: Any, *, handlers: Collection[str], max_payload: int) -> Plan:
    """Check a producer's return value.  `handlers`: the handlers a planned job may name
    (with exactly one, `handler` may be left out)."""
    if not isinstance(value, dict):
        raise InvalidPlan("a plan is an object with start, stop, stop_others, end_schedule; "
                          f"got {_kind(value)}")
    unknown = sorted(set(value) - PLAN_KEYS)
    if unknown:
        raise InvalidPlan(f"unknown key(s) in the plan: {', '.join(unknown)}")
    starts = value.get("start", [])
    stops = value.get("stop", [])
    stop_others = value.get("stop_others", False)
    if not isinstance(starts, list):
        raise InvalidPlan(f"start must be a list; got {_kind(starts)}")
    if not isinstance(stops, list) or not all(isinstance(key, str) for key in stops):
        raise InvalidPlan("stop must be a list of job keys")
    if not isinstance(stop_others, bool):
        raise InvalidPlan(f"stop_others must be true or false; got {_kind(stop_others)}")
    end_schedule = value.get("end_schedule", False)
    if not isinstance(end_schedule, bool):
        raise InvalidPlan(f"end_schedule must be true or false; got {_kind(end_schedule)}")
    planned = tuple(_planned(index, entry, handlers, max_payload)
                    for index, entry in enumerate(starts))
    seen: set[str] = set()
    for job in planned:
        if job.key in seen:
            raise InvalidPlan(f"start names key {job.key!r} twice")
        seen.add(job.key)
    for key in stops:
        _checked_key(key, "stop")
    return Plan(start=planned, stop=tuple(stops), stop_others=stop_others,
                end_schedule=end_schedule)


def diff_plan(plan: Plan, *, live: Set[str], own_live: Set[str]) -> PlanDiff:
    """`live`: keys of every live job; `own_live`: those this schedule started."""
    planned = {job.key for job in plan.start}
    named = [key for key in plan.stop if key in live and key not in planned]
    others = sorted(own_live - planned - set(named)) if plan.stop_others else []
    return PlanDiff(
        start=tuple(job for job in plan.start if job.key not in live),
        keep=tuple(job.key for job in plan.start if job.key in live),
        stop=tuple(dict.fromkeys([*named, *others])),
    )


def _planned(index: int, entry: Any, handlers: Collection[str], max_payload: int) -> PlannedJob:
    where = f"start[{index}]"
    if not isinstance(entry, dict):
        raise InvalidPlan(f"{where} must be an object with key, handler, payload")
    unknown = sorted(set(entry) - START_KEYS)
    if unknown:
        raise InvalidPlan(f"{where}: unknown key(s) {', '.join(unknown)}")
    key = entry.get("key")
    if not isinstance(key, str):
        raise InvalidPlan(f"{where}: key must be a string")
    _checked_key(key, where)
    handler = entry.get("handler")
    if handler is None and len(handlers) == 1:
        handler = next(iter(handlers))
    if not isinstance(handler, str) or handler not in handlers:
        known = ", ".join(sorted(handlers)) or "none"
        raise InvalidPlan(f"{where}: handler {handler!r} is not configured (configured: {known})")
    try:
        payload = validate_payload_size(orjson.dumps(entry.get("payload")), max_payload)
    except InvalidJob as error:
        raise InvalidPlan(f"{where}: {error}") from None
    return PlannedJob(key=key, handler=handler, payload=payload)


def _checked_key(key: str, where: str) -> None:
    try:
        validate_key(key)
    except InvalidJob as error:
        raise InvalidPlan(f"{where}: {error}") from None


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
