"""A schedule's ticks from its config: `every` seconds, or a cron expression in a zone.

Cron expressions are read by cronsim (the cron evaluator of healthchecks.io): five
fields with Debian cron's meaning, including its daylight-saving rules.  A job at a
fixed time that falls in a spring-forward gap runs at the first minute after the gap;
a job at a fixed time that occurs twice when clocks fall back runs once, at the first
occurrence; jobs with `*` in the minute or hour field keep their interval in wall-clock
terms through both changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from supervisor.core.ticks import Cadence, Every


@dataclass(frozen=True)
class Cron:
    expression: str
    timezone: str = "UTC"

    @cached_property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def latest(self, at: float) -> float | None:
        # cronsim's reverse walk starts one second before `start`; ticks fall on whole
        # seconds, so starting a second after `at` finds the last tick at or before it.
        start = datetime.fromtimestamp(int(at) + 1, self.zone)
        try:
            return next(CronSim(self.expression, start, reverse=True)).timestamp()
        except StopIteration:
            return None

    def following(self, after: float) -> float:
        start = datetime.fromtimestamp(int(after), self.zone)
        return next(CronSim(self.expression, start)).timestamp()


def cron_problem(expression: str) -> str | None:
    """Why cronsim refuses `expression`, or None if it reads it."""
    try:
        CronSim(expression, datetime.now(UTC))
    except CronSimError as error:
        return str(error)
    return None


def cadence_of(*, every: float | None, cron: str | None, timezone: str) -> Cadence:
    if every is not None:
        return Every(every)
    if cron is None:
        raise ValueError("a schedule needs every or cron")
    return Cron(cron, timezone)


def tick_label(tick: float) -> str:
    """A tick as it appears in job keys (`{tick}`): UTC, ISO 8601 basic format."""
    moment = datetime.fromtimestamp(tick, UTC)
    if tick == int(tick):
        return moment.strftime("%Y%m%dT%H%M%SZ")
    return moment.strftime("%Y%m%dT%H%M%S.%fZ")
