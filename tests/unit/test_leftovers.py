"""When the fork server lets a job's `exited` event go: once its leftovers are gone."""

from __future__ import annotations

from dataclasses import replace

from sandbox.leftovers import ExitHold
from sandbox.protocol import Exited


def event(job: str) -> Exited:
    return Exited(job=job, pid=100, code=0, signal=None, fenced=False)


def test_an_exit_without_leftovers_goes_at_once() -> None:
    hold = ExitHold(bound=5.0)
    hold.hold(event("a"), now=0.0)
    assert hold.release([], now=0.0) == [event("a")]
    assert not hold


def test_an_exit_waits_until_the_leftovers_are_gone() -> None:
    hold = ExitHold(bound=5.0)
    hold.hold(event("a"), now=0.0)
    assert hold.release([101, 102], now=0.1) == []
    assert hold.release([102], now=0.2) == []
    assert hold.next_due() == 5.0
    assert hold.release([], now=0.3) == [event("a")]


def test_after_the_bound_the_exit_names_the_survivors() -> None:
    hold = ExitHold(bound=5.0)
    hold.hold(event("a"), now=0.0)
    hold.hold(event("b"), now=3.0)
    assert hold.release([102, 101], now=5.0) == [replace(event("a"), survivors=[101, 102])]
    # Named once, they hold no other exit.
    assert hold.release([101, 102], now=5.1) == [event("b")]


def test_a_new_leftover_holds_exits_again_after_survivors_were_named() -> None:
    hold = ExitHold(bound=5.0)
    hold.hold(event("a"), now=0.0)
    assert hold.release([101], now=5.0) == [replace(event("a"), survivors=[101])]
    hold.hold(event("b"), now=6.0)
    assert hold.release([101, 202], now=6.0) == []
    assert hold.release([101], now=6.1) == [event("b")]


def test_a_reaped_survivor_is_forgotten_as_its_pid_may_come_back() -> None:
    hold = ExitHold(bound=5.0)
    hold.hold(event("a"), now=0.0)
    hold.release([101], now=5.0)
    assert hold.release([], now=6.0) == []
    hold.hold(event("b"), now=7.0)
    assert hold.release([101], now=7.0) == []  # a new process with that pid


def test_release_all_names_what_survives() -> None:
    hold = ExitHold(bound=5.0)
    hold.hold(event("a"), now=0.0)
    assert hold.release_all([7]) == [replace(event("a"), survivors=[7])]
    assert hold.release_all([]) == []
