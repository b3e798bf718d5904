"""When a dead fork server is replaced, and when the supervisor gives up on it.

A fork server that had forked a job may have been killed by that job (without a
sandbox a job can SIGKILL its parent): such a death is the jobs' business (the job
spends its attempt, see `core.blame`), never a reason for the supervisor to exit.
Only deaths no job can explain count against the budget: a fork server that failed
to start, or died before it forked anything.  The budget is a rate: more than
`max_deaths` of those within `window` seconds, with no healthy fork server between
them, is a broken host or install, and the supervisor gives up (exit 1).  A healthy
fork server, one that forked a job or stayed up `healthy_uptime` seconds, resets it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from supervisor.core.retry import loop_retry_delay


@dataclass(frozen=True, kw_only=True)
class ForkServerEnd:
    """A fork server that died, or one that could not be started (uptime 0)."""

    at: float
    uptime: float
    forked: bool  # it had forked at least one job


@dataclass(frozen=True, kw_only=True)
class RestartBudget:
    max_deaths: int = 5
    window: float = 600.0
    healthy_uptime: float = 60.0


@dataclass(frozen=True)
class Restart:
    delay: float  # seconds to wait before starting the next one


@dataclass(frozen=True)
class GiveUp:
    why: str


def was_healthy(end: ForkServerEnd, budget: RestartBudget) -> bool:
    return end.forked or end.uptime >= budget.healthy_uptime


def decide_restart(
    ends: Sequence[ForkServerEnd], now: float, budget: RestartBudget = RestartBudget()
) -> Restart | GiveUp:
    """After the last of `ends` (oldest first): restart after a delay, or give up.
    The delay grows with the unexplained deaths in a row, 0.1 s doubling up to 5 s."""
    unexplained = 0
    for end in ends:
        if was_healthy(end, budget):
            unexplained = 0
        elif now - end.at <= budget.window:
            unexplained += 1
    if unexplained > budget.max_deaths:
        return GiveUp(f"{unexplained} fork servers in a row died before forking any job "
                      f"(within {budget.window:g} s)")
    return Restart(loop_retry_delay(max(1, unexplained)))


def recent_ends(
    ends: Sequence[ForkServerEnd], now: float, budget: RestartBudget = RestartBudget()
) -> list[ForkServerEnd]:
    """What to keep of `ends` for the next decision: those within the window."""
    return [end for end in ends if now - end.at <= budget.window]
