"""core/health.py: what /healthz and /readyz answer."""

from __future__ import annotations

from supervisor.core.health import MAX_CHECK_IN_AGE, liveness_problem, readiness_problem


def test_alive_while_the_loop_checks_in_and_the_fork_server_answers() -> None:
    assert liveness_problem(now=10.0, checked_at=9.0, fork_server_answered=True) is None


def test_a_loop_that_stopped_checking_in_is_not_alive() -> None:
    problem = liveness_problem(now=10.0 + MAX_CHECK_IN_AGE + 1, checked_at=10.0,
                               fork_server_answered=True)
    assert problem == f"the event loop has not checked in for {MAX_CHECK_IN_AGE + 1:.1f} s"
    assert liveness_problem(now=1.0, checked_at=None, fork_server_answered=True) == \
        "not started yet"
    assert liveness_problem(now=1.0, checked_at=1.0, fork_server_answered=False) == \
        "the fork server did not answer"


def test_ready_only_when_alive_serving_not_draining_and_the_store_answers() -> None:
    def ready(**changes: object) -> str | None:
        state = {"alive": None, "serving": True, "draining": False, "store_failing": False}
        state.update(changes)
        return readiness_problem(**state)  # type: ignore[arg-type]

    assert ready() is None
    assert ready(alive="the fork server did not answer") == "the fork server did not answer"
    assert ready(serving=False) == "not serving yet (registering in the store)"
    assert ready(draining=True) == "draining"
    assert ready(store_failing=True) == "the store is failing"
