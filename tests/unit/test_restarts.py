"""The fork server restart budget: a rate of deaths no job explains, reset by a
healthy fork server (`core.restarts`)."""

from supervisor.core.restarts import (
    ForkServerEnd,
    GiveUp,
    Restart,
    RestartBudget,
    decide_restart,
    recent_ends,
)

BUDGET = RestartBudget(max_deaths=5, window=600.0, healthy_uptime=60.0)


def idle_death(at: float) -> ForkServerEnd:
    return ForkServerEnd(at=at, uptime=1.0, forked=False)


def killed_under_a_job(at: float) -> ForkServerEnd:
    return ForkServerEnd(at=at, uptime=0.5, forked=True)


def test_a_first_death_restarts_at_once() -> None:
    assert decide_restart([idle_death(0.0)], 0.0, BUDGET) == Restart(0.1)


def test_unexplained_deaths_in_a_row_back_off_then_give_up() -> None:
    ends = [idle_death(float(n)) for n in range(6)]
    assert decide_restart(ends[:5], 5.0, BUDGET) == Restart(1.6)
    decision = decide_restart(ends, 6.0, BUDGET)
    assert isinstance(decision, GiveUp)
    assert "6 fork servers" in decision.why


def test_deaths_under_jobs_never_give_up_and_do_not_slow_restarts() -> None:
    """A job can kill its fork server: any number of such deaths is the jobs' business."""
    ends = [killed_under_a_job(float(n)) for n in range(1000)]
    assert decide_restart(ends, 1000.0, BUDGET) == Restart(0.1)


def test_a_fork_server_that_forked_a_job_resets_the_count() -> None:
    ends = [*(idle_death(float(n)) for n in range(5)), killed_under_a_job(5.0),
            *(idle_death(float(n)) for n in range(6, 11))]
    assert decide_restart(ends, 11.0, BUDGET) == Restart(1.6)


def test_a_fork_server_that_stayed_up_resets_the_count() -> None:
    ends = [*(idle_death(float(n)) for n in range(5)),
            ForkServerEnd(at=100.0, uptime=60.0, forked=False),
            idle_death(101.0)]
    assert decide_restart(ends, 101.0, BUDGET) == Restart(0.1)


def test_deaths_older_than_the_window_are_forgotten() -> None:
    """The old budget counted deaths over the supervisor's whole life."""
    ends = [*(idle_death(float(n)) for n in range(5)), idle_death(3600.0)]
    assert decide_restart(ends, 3600.0, BUDGET) == Restart(0.1)
    assert recent_ends(ends, 3600.0, BUDGET) == [idle_death(3600.0)]
