"""What a finished child means for its job: complete, fail, release, snooze, stop or
abandon."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class StopReason(enum.Enum):
    USER = "stop"  # `poolsup stop`: the job ends stopped
    DRAIN = "drain"  # supervisor shutdown: back to pending, no attempt spent
    REBALANCE = "rebalance"  # moved to another supervisor: same as drain
    TIMEOUT = "timeout"  # the handler's timeout: the attempt fails, unless it returns
    LEASE_LOST = "lease"  # someone else may own it now: write nothing


@dataclass(frozen=True, kw_only=True)
class ChildExit:
    """How a child ended, as far as the supervisor saw it."""

    # The error the child sent (the handler raised, or could not run), if it sent one,
    # and whether it fails the job for good (`sandbox.Fail`).
    error: str | None = None
    final: bool = False
    result_json: bytes | None  # the raw JSON of a returned value
    exit_code: int | None
    exit_signal: int | None
    fenced: bool  # killed by the fork server because the lease could not be renewed
    # Ended by the fork server for a limit of its handler, e.g. "cpu limit 2 s exceeded".
    reason: str | None = None
    # Its shared child was killed on another job's account: whose, and why.
    killed_for: str | None = None
    # The child broke the control protocol (bytes that are not a message, a result over
    # max_result): the attempt fails with this, whatever the child said besides.
    protocol_error: str | None = None
    # The handler returned its result after a stop had reached it (in answer to it).
    answered_stop: bool = False
    # The handler raised sandbox.Snooze: seconds until it may run again (checked).
    snooze: float | None = None
    # It raised sandbox.EndSchedule: a producer's plan that ends its schedule.
    end_schedule: bool = False


@dataclass(frozen=True)
class Complete:
    result_json: bytes


@dataclass(frozen=True)
class Fail:
    error: str
    final: bool
    cause: str = "error"  # error (the handler's), crash, timeout, limit, protocol


@dataclass(frozen=True)
class Release:
    why: str
    delay: float = 0.0  # seconds before it may be claimed again (0: at once, first in line)


@dataclass(frozen=True)
class Snooze:
    """The handler asked to run again in `delay` seconds: no attempt spent."""

    delay: float


@dataclass(frozen=True)
class Stopped:
    why: str


@dataclass(frozen=True)
class Abandon:
    """Write nothing: the lease is gone and the store's recovery owns the job now."""

    why: str


Outcome = Complete | Fail | Release | Snooze | Stopped | Abandon


# What a job's handler gets for raising sandbox.EndSchedule (a producer's exception):
# nothing to end, and the same again on a retry.
END_SCHEDULE_IN_A_JOB = ("EndSchedule: sandbox.EndSchedule ends a schedule from its producer; "
                         "a job's handler cannot end one")


def producer_ends_schedule(child: ChildExit) -> bool:
    """Whether a producer's run ended in sandbox.EndSchedule (its plan: end the schedule,
    nothing else), rather than in a plan, an error, a limit or a timeout."""
    return (child.end_schedule and child.protocol_error is None and child.reason is None
            and not child.fenced)


def describe_exit(exit_code: int | None, signal_name: str | None) -> str:
    if signal_name is not None:
        return f"killed by signal {signal_name}"
    if exit_code == 0:
        return "exited without a result (exit code 0)"
    return f"exit code {exit_code}"


def decide_outcome(
    child: ChildExit,
    stop_reason: StopReason | None,
    *,
    timeout: float,
    signal_name: str | None = None,
) -> Outcome:
    """The single place that maps a child's end to a store operation."""
    if stop_reason is StopReason.LEASE_LOST:
        return Abandon("lease lost while running")
    if stop_reason is StopReason.USER:
        return Stopped("stopped by request")
    if stop_reason in (StopReason.DRAIN, StopReason.REBALANCE):
        return _handed_off(child, stop_reason)
    if child.protocol_error is not None and stop_reason is None:
        return Fail(child.protocol_error, final=False, cause="protocol")
    if child.result_json is not None and child.protocol_error is None:
        return Complete(child.result_json)
    if child.fenced:
        return Release("killed by the fence: the lease could not be renewed in time")
    if child.killed_for is not None and child.reason is None:
        # Nothing of this job's ended it: it runs again, its attempt not spent.
        return Release(f"its shared child was killed: {child.killed_for}")
    if child.reason is not None:
        # Whatever else was under way (a drain, a timeout): the limit is what ended it.
        return Fail(child.reason, final=False, cause="limit")
    if child.snooze is not None and child.protocol_error is None:
        # Even at the timeout: what the handler said wins, as a returned value does.
        return Snooze(child.snooze)
    if stop_reason is StopReason.TIMEOUT:
        return Fail(f"timeout after {timeout:g} s", final=False, cause="timeout")
    if child.end_schedule:
        return Fail(END_SCHEDULE_IN_A_JOB, final=True)
    if child.error is not None:
        return Fail(child.error or "handler failed", child.final)
    return Fail(describe_exit(child.exit_code, signal_name), final=False, cause="crash")


def _handed_off(child: ChildExit, stop_reason: StopReason) -> Outcome:
    """A drain or a move: the job runs again elsewhere, without spending an attempt,
    unless it had finished before the stop reached it, failed for good
    (`sandbox.Fail`), or was ended for a limit; a snooze holds it back as asked."""
    returned_first = not child.answered_stop and child.protocol_error is None
    if child.result_json is not None and returned_first:
        return Complete(child.result_json)
    if child.reason is not None:
        return Fail(child.reason, final=False, cause="limit")
    if child.error is not None and child.final:
        return Fail(child.error or "handler failed", True)
    if child.snooze is not None and child.protocol_error is None:
        return Snooze(child.snooze)
    return Release(stop_reason.value)
