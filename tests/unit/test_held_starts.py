"""A one-job child's start report, held a moment by the fork server so that a short
job's start and exit reach the supervisor together (`sandbox.held_starts`)."""

from __future__ import annotations

from sandbox.held_starts import START_HOLD, HeldStarts
from sandbox.protocol import Spawned


def test_a_start_is_held_until_its_exit_or_the_hold_runs_out() -> None:
    starts = HeldStarts()
    first, second = Spawned(job="a", pid=10), Spawned(job="b", pid=11)
    starts.hold(first, now=100.0)
    starts.hold(second, now=100.001)
    assert starts.next_due() == 100.0 + START_HOLD
    assert starts.due(100.0 + START_HOLD / 2) == []
    assert starts.take("b") is second  # its job ended first: sent before its exit
    assert starts.take("b") is None
    assert starts.due(100.0 + START_HOLD) == [first]  # the hold ran out: sent alone
    assert starts.next_due() is None


def test_the_starts_still_held_are_all_given_up_at_once() -> None:
    starts = HeldStarts()
    for n in range(3):
        starts.hold(Spawned(job=f"j{n}", pid=n), now=float(n))
    assert [report.job for report in starts.take_all()] == ["j0", "j1", "j2"]
    assert starts.next_due() is None and starts.due(1e9) == []
