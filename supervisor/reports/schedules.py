"""Schedules as `poolsup schedules` and `status` report them: the store's record of each
(last tick, outcome, who fired it, whether its producer ended it) beside its config (next
tick)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from supervisor.config import ScheduleConfig
from supervisor.core.ticks import Fire, Standing, decide_tick, fingerprint, standing
from supervisor.store.records import RELEASED, ScheduleBook, ScheduleRecord


def schedule_views(
    book: ScheduleBook, configured: Mapping[str, ScheduleConfig]
) -> list[dict[str, Any]]:
    """One dict per schedule that is configured here or has a record in the store."""
    records = {record.name: record for record in book.schedules}
    return [_view(name, records.get(name), configured.get(name), book.store_time)
            for name in sorted(set(records) | set(configured))]


def _view(
    name: str, record: ScheduleRecord | None, config: ScheduleConfig | None, now: float
) -> dict[str, Any]:
    last_tick = record.last_tick if record else None
    ended = record is not None and record.ended_at is not None
    state = Standing.ENDED if ended else Standing.RUNNING
    next_tick = None
    if config is not None:
        state = standing(ended=ended, ended_fingerprint=record.fingerprint if record else None,
                         fingerprint=fingerprint(config.settings))
        decision = decide_tick(config.cadence, name=name, jitter=config.jitter,
                               last_tick=last_tick, now=now,
                               released=record is not None and record.outcome == RELEASED,
                               restarted=state is Standing.RESTARTED)
        if state is not Standing.ENDED:
            next_tick = decision.not_before if isinstance(decision, Fire) else decision.until
    return {
        "name": name,
        "configured": config is not None,
        "kind": None if config is None else ("producer" if config.producer else "handler"),
        "every": config.every if config else None,
        "cron": config.cron if config else None,
        "timezone": config.timezone if config else None,
        "handler": config.handler if config else None,
        # "ended": its producer ended it (and its definition is still the one that did)
        "state": "ended" if state is Standing.ENDED else "active",
        "ended_at": record.ended_at if record and state is Standing.ENDED else None,
        "ended_tick": record.ended_tick if record and state is Standing.ENDED else None,
        "last_tick": last_tick,
        "next_tick": next_tick,
        "outcome": record.outcome if record else None,
        "detail": record.detail if record else None,
        "fired_by": record.fired_by if record else None,
        "fired_at": record.fired_at if record else None,
        "fingerprint": record.fingerprint if record else None,
        "fires": record.fires if record else 0,
        "skipped": record.skipped if record else 0,
        "missed": record.missed if record else 0,
        "store_time": now,
    }
