"""A schedule that ends itself: the plan's "end_schedule", where a schedule stands once
ended, and sandbox.EndSchedule raised by a producer or, wrongly, by a job's handler."""

from __future__ import annotations

import pytest

from supervisor.core.outcome import (
    END_SCHEDULE_IN_A_JOB,
    ChildExit,
    Fail,
    decide_outcome,
    producer_ends_schedule,
)
from supervisor.core.plans import InvalidPlan, parse_plan
from supervisor.core.ticks import Every, Fire, Standing, Wait, decide_tick, standing


def test_a_plan_may_end_its_schedule_and_does_not_by_default() -> None:
    assert parse_plan({"end_schedule": True}, handlers=["h"], max_payload=100).end_schedule
    assert not parse_plan({"start": []}, handlers=["h"], max_payload=100).end_schedule


@pytest.mark.parametrize("value", [1, "yes", None])
def test_end_schedule_is_true_or_false(value: object) -> None:
    with pytest.raises(InvalidPlan, match=r"^end_schedule must be true or false"):
        parse_plan({"end_schedule": value}, handlers=["h"], max_payload=100)


def test_an_ended_schedule_stays_ended_until_its_definition_changes() -> None:
    assert standing(ended=False, ended_fingerprint="a", fingerprint="a") is Standing.RUNNING
    assert standing(ended=True, ended_fingerprint="a", fingerprint="a") is Standing.ENDED
    assert standing(ended=True, ended_fingerprint="a", fingerprint="b") is Standing.RESTARTED


def ended(**changes: object) -> ChildExit:
    fields: dict[str, object] = {"result_json": None,
                                 "exit_code": 0, "exit_signal": None, "fenced": False,
                                 "end_schedule": True}
    fields.update(changes)
    return ChildExit(**fields)  # type: ignore[arg-type]


def test_a_producer_raising_end_schedule_ends_its_schedule_unless_something_else_ended_it() -> None:
    assert producer_ends_schedule(ended())
    assert not producer_ends_schedule(ended(protocol_error="bad bytes"))
    assert not producer_ends_schedule(ended(reason="memory limit 1 MiB exceeded"))
    assert not producer_ends_schedule(ended(fenced=True, exit_signal=9, exit_code=None))
    assert not producer_ends_schedule(ended(end_schedule=False))


def test_a_jobs_handler_raising_end_schedule_fails_for_good_with_one_line() -> None:
    outcome = decide_outcome(ended(), None, timeout=0)
    assert outcome == Fail(END_SCHEDULE_IN_A_JOB, final=True)
    assert "\n" not in END_SCHEDULE_IN_A_JOB


def restarted_at(now: float, *, restarted: bool = True) -> Fire | Wait:
    """Every 300 s, ended by its tick 600, its definition changed since."""
    return decide_tick(Every(300), name="s", jitter=0, last_tick=600.0, now=now,
                       restarted=restarted)


def test_a_restarted_schedule_fires_after_its_last_tick_as_a_new_one_counting_no_misses() -> None:
    assert restarted_at(610) == Wait(until=900)  # its ending tick does not fire again
    assert restarted_at(1210) == Fire(tick=1200, not_before=1200, missed=0)
    assert restarted_at(1210, restarted=False) == Fire(tick=1200, not_before=1200, missed=1)
    # past a new schedule's grace, it waits for the next tick as a new schedule does
    assert restarted_at(1290) == Wait(until=1500)
    assert isinstance(restarted_at(1290, restarted=False), Fire)
