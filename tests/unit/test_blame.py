"""Who pays for a fork server's death (`core.blame`)."""

import pytest

from supervisor.core.blame import (
    RELEASE_DELAY,
    Blame,
    LastFork,
    Verdict,
    judge_death,
    outcome_after_death,
    spawn_wait,
)
from supervisor.core.outcome import Complete, Fail, Release, Stopped

CRASH = Fail("killed by signal SIGKILL", final=False, cause="crash")


def test_the_job_forked_last_alone_is_blamed_and_the_others_are_bystanders() -> None:
    judgement = judge_death({"long": 0.0, "killer": 30.0}, {}, 30.1)
    assert judgement.verdicts == {"long": Verdict(Blame.BYSTANDER),
                                  "killer": Verdict(Blame.BLAMED)}
    assert judgement.suspected == {}


def test_the_only_job_is_blamed() -> None:
    assert judge_death({"one": 0.0}, {}, 500.0).verdicts == {"one": Verdict(Blame.BLAMED)}


def test_jobs_forked_together_last_are_suspects() -> None:
    judgement = judge_death({"old": 0.0, "b": 10.0, "a": 10.2}, {}, 10.3)
    assert judgement.verdicts == {"old": Verdict(Blame.BYSTANDER),
                                  "b": Verdict(Blame.SUSPECT),
                                  "a": Verdict(Blame.SUSPECT)}
    assert judgement.suspected == {"b": 10.3, "a": 10.3}


def test_a_suspect_forked_together_with_others_again_is_blamed() -> None:
    judgement = judge_death({"killer": 20.0, "other": 20.1}, {"killer": 10.3}, 20.2)
    assert judgement.verdicts == {"killer": Verdict(Blame.BLAMED),
                                  "other": Verdict(Blame.SUSPECT)}
    assert judgement.suspected == {"other": 20.2}


def test_suspicions_are_forgotten_after_the_memory() -> None:
    judgement = judge_death({"a": 1000.0, "b": 1000.0}, {"a": 1.0, "gone": 2.0}, 1000.0,
                            memory=600.0)
    assert judgement.verdicts["a"] == Verdict(Blame.SUSPECT)
    assert judgement.suspected == {"a": 1000.0, "b": 1000.0}


def test_a_blamed_job_spends_its_attempt_with_an_error_that_says_why() -> None:
    outcome = outcome_after_death(CRASH, Verdict(Blame.BLAMED), "killed by SIGKILL")
    assert outcome == Fail("the fork server died under it (killed by SIGKILL)", final=False,
                           cause="fork server")


def test_bystanders_and_suspects_are_released_without_spending_an_attempt() -> None:
    bystander = outcome_after_death(CRASH, Verdict(Blame.BYSTANDER), "exit code 1")
    assert isinstance(bystander, Release)
    assert bystander.delay == RELEASE_DELAY
    suspect = outcome_after_death(CRASH, Verdict(Blame.SUSPECT), "exit code 1")
    assert isinstance(suspect, Release)
    assert suspect.delay == RELEASE_DELAY


def test_what_the_child_said_or_a_stop_stands() -> None:
    for outcome in (Complete(b"1"), Fail("boom", final=True), Stopped("stopped by request"),
                    Fail("timeout after 2 s", final=False, cause="timeout")):
        assert outcome_after_death(outcome, Verdict(Blame.BLAMED), "killed by SIGKILL") \
            == outcome


def test_a_suspect_is_forked_alone() -> None:
    """No other job within `together` of a suspect's fork, before or after it."""
    suspected = {"suspect": 100.0}
    assert spawn_wait("suspect", suspected, LastFork(200.0, False), 200.1,
                      together=0.5) == pytest.approx(0.4)
    assert spawn_wait("other", suspected, LastFork(200.0, True), 200.2,
                      together=0.5) == pytest.approx(0.3)
    assert spawn_wait("suspect", suspected, LastFork(200.0, False), 201.0, together=0.5) == 0.0


def test_other_jobs_are_forked_without_waiting() -> None:
    assert spawn_wait("a", {}, LastFork(200.0, False), 200.0) == 0.0
    assert spawn_wait("a", {}, None, 200.0) == 0.0
    assert spawn_wait("old", {"old": 0.0}, LastFork(700.0, False), 700.1, memory=600.0) == 0.0
