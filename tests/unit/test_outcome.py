import signal

from supervisor.core.outcome import (
    Abandon,
    ChildExit,
    Complete,
    Fail,
    Release,
    Snooze,
    Stopped,
    StopReason,
    decide_outcome,
)


def _error(message: dict[str, object] | None) -> dict[str, object]:
    """ChildExit's fields for the error message the child sent, if any."""
    if message is None or message["t"] != "error":
        return {}
    return {"error": message["error"], "final": message["final"]}


def exited(*, message=None, result=None, code=0, sig=None, fenced=False, reason=None,  # type: ignore[no-untyped-def]
           snooze=None) -> ChildExit:
    return ChildExit(**_error(message), result_json=result, exit_code=code, exit_signal=sig,
                     fenced=fenced, reason=reason, snooze=snooze)


MEMORY = "memory limit 100 MiB exceeded (peak 131 MiB)"


def test_a_result_completes() -> None:
    assert decide_outcome(exited(result=b"1"), None, timeout=0) == Complete(b"1")


def test_lost_lease_writes_nothing_even_with_a_result() -> None:
    outcome = decide_outcome(exited(result=b"1"), StopReason.LEASE_LOST, timeout=0)
    assert isinstance(outcome, Abandon)


def test_fenced_child_is_released() -> None:
    outcome = decide_outcome(exited(code=None, sig=9, fenced=True), None, timeout=0)
    assert isinstance(outcome, Release)


def test_user_stop_ends_stopped() -> None:
    assert isinstance(decide_outcome(exited(code=143), StopReason.USER, timeout=0), Stopped)


def test_drain_and_rebalance_release() -> None:
    for reason in (StopReason.DRAIN, StopReason.REBALANCE):
        assert isinstance(decide_outcome(exited(code=143), reason, timeout=0), Release)


def test_timeout_fails_the_attempt_with_the_limit() -> None:
    outcome = decide_outcome(exited(code=None, sig=9), StopReason.TIMEOUT, timeout=2)
    assert outcome == Fail("timeout after 2 s", final=False, cause="timeout")


def test_a_result_returned_in_answer_to_a_timeout_completes() -> None:
    """The handler chose to wrap up when asked (Celery's soft time limit does the same)."""
    outcome = decide_outcome(answered(), StopReason.TIMEOUT, timeout=2)
    assert outcome == Complete(b'"done"')


def test_handler_error_message_is_kept() -> None:
    message = {"t": "error", "error": "ValueError: boom", "final": True}
    assert decide_outcome(exited(message=message, code=0), None, timeout=0) == Fail(
        "ValueError: boom", final=True
    )


def test_crash_without_message_names_the_signal() -> None:
    outcome = decide_outcome(exited(code=None, sig=signal.SIGSEGV), None, timeout=0,
                             signal_name="SIGSEGV")
    assert outcome == Fail("killed by signal SIGSEGV", final=False, cause="crash")


def test_exit_code_without_message() -> None:
    assert decide_outcome(exited(code=3), None, timeout=0) == Fail(
        "exit code 3", final=False, cause="crash")


def test_user_stop_wins_over_a_result_returned_in_response() -> None:
    assert isinstance(decide_outcome(exited(result=b'"bye"'), StopReason.USER, timeout=0), Stopped)


def test_drain_lets_a_finished_job_complete() -> None:
    assert decide_outcome(exited(result=b"1"), StopReason.DRAIN, timeout=0) == Complete(b"1")


def test_a_limit_the_fork_server_enforced_fails_the_attempt_with_its_reason() -> None:
    for reason in (MEMORY, "cpu limit 2 s exceeded"):
        outcome = decide_outcome(exited(code=None, sig=9, reason=reason), None, timeout=0,
                                 signal_name="SIGKILL")
        assert outcome == Fail(reason, final=False, cause="limit")


def test_a_limit_is_the_reason_even_during_a_timeout_or_a_drain() -> None:
    for stop in (StopReason.TIMEOUT, StopReason.DRAIN, StopReason.REBALANCE):
        outcome = decide_outcome(exited(code=None, sig=9, reason=MEMORY), stop, timeout=2)
        assert outcome == Fail(MEMORY, final=False, cause="limit")


def test_a_limit_does_not_override_a_stop_a_fence_a_lost_lease_or_a_result() -> None:
    limited = exited(code=None, sig=9, reason=MEMORY)
    assert isinstance(decide_outcome(limited, StopReason.USER, timeout=0), Stopped)
    assert isinstance(decide_outcome(limited, StopReason.LEASE_LOST, timeout=0), Abandon)
    fenced = exited(code=None, sig=9, fenced=True, reason=MEMORY)
    assert isinstance(decide_outcome(fenced, None, timeout=0), Release)
    returned = exited(result=b"1", code=None, sig=9, reason=MEMORY)
    assert decide_outcome(returned, None, timeout=0) == Complete(b"1")


def test_exit_without_a_result_or_a_message() -> None:
    outcome = decide_outcome(exited(code=0), None, timeout=0)
    assert outcome == Fail("exited without a result (exit code 0)", final=False, cause="crash")


def test_a_protocol_error_fails_the_attempt_even_with_a_result() -> None:
    child = ChildExit(result_json=b"1", exit_code=0, exit_signal=None,
                      fenced=False, protocol_error="the child sent an invalid control message")
    assert decide_outcome(child, None, timeout=0) == Fail(
        "the child sent an invalid control message", final=False, cause="protocol")


def test_a_protocol_error_does_not_override_a_stop_or_a_drain() -> None:
    child = ChildExit(result_json=None, exit_code=143, exit_signal=None,
                      fenced=False, protocol_error="result is too large")
    assert isinstance(decide_outcome(child, StopReason.USER, timeout=0), Stopped)
    assert isinstance(decide_outcome(child, StopReason.DRAIN, timeout=0), Release)


def answered(*, result: bytes | None = b'"done"', answered_stop: bool = True,
             message: dict[str, object] | None = None, reason: str | None = None) -> ChildExit:
    return ChildExit(**_error(message), result_json=result, exit_code=0, exit_signal=None,
                     fenced=False, reason=reason, answered_stop=answered_stop)


def test_a_value_returned_in_answer_to_a_drain_or_a_move_releases_the_job() -> None:
    for reason in (StopReason.DRAIN, StopReason.REBALANCE):
        outcome = decide_outcome(answered(), reason, timeout=0)
        assert outcome == Release(reason.value), reason


def test_a_value_returned_before_the_drain_reached_the_handler_completes() -> None:
    outcome = decide_outcome(answered(answered_stop=False), StopReason.DRAIN, timeout=0)
    assert outcome == Complete(b'"done"')


def test_sandbox_fail_during_a_drain_still_fails_for_good() -> None:
    error = {"t": "error", "error": "Fail: bad input", "final": True}
    outcome = decide_outcome(answered(result=None, message=error), StopReason.DRAIN, timeout=0)
    assert outcome == Fail("Fail: bad input", True)


def test_an_ordinary_error_in_answer_to_a_drain_releases() -> None:
    error = {"t": "error", "error": "ValueError: interrupted", "final": False}
    outcome = decide_outcome(answered(result=None, message=error), StopReason.DRAIN, timeout=0)
    assert isinstance(outcome, Release)


def test_a_limit_during_a_drain_still_fails_the_attempt() -> None:
    outcome = decide_outcome(answered(result=None, reason=MEMORY), StopReason.DRAIN, timeout=0)
    assert outcome == Fail(MEMORY, final=False, cause="limit")


def test_a_user_stop_ends_stopped_even_with_a_value_returned_before() -> None:
    outcome = decide_outcome(answered(answered_stop=False), StopReason.USER, timeout=0)
    assert isinstance(outcome, Stopped)


SNOOZED = {"t": "snooze", "seconds": 30.0}


def test_a_snooze_snoozes() -> None:
    outcome = decide_outcome(exited(message=SNOOZED, snooze=30.0), None, timeout=0)
    assert outcome == Snooze(30.0)


def test_a_snooze_at_the_timeout_is_kept_as_a_result_would_be() -> None:
    outcome = decide_outcome(exited(message=SNOOZED, snooze=30.0), StopReason.TIMEOUT, timeout=5)
    assert outcome == Snooze(30.0)


def test_a_snooze_in_a_drain_or_a_move_holds_the_job_back_as_asked() -> None:
    for reason in (StopReason.DRAIN, StopReason.REBALANCE):
        assert decide_outcome(exited(message=SNOOZED, snooze=30.0), reason, timeout=0) \
            == Snooze(30.0)


def test_a_snooze_after_a_user_stop_ends_stopped_and_after_a_lost_lease_writes_nothing() -> None:
    child = exited(message=SNOOZED, snooze=30.0)
    assert isinstance(decide_outcome(child, StopReason.USER, timeout=0), Stopped)
    assert isinstance(decide_outcome(child, StopReason.LEASE_LOST, timeout=0), Abandon)


def test_a_snooze_beside_a_protocol_error_fails_the_attempt() -> None:
    child = ChildExit(result_json=None, exit_code=0, exit_signal=None,
                      fenced=False, protocol_error="the child sent an invalid snooze",
                      snooze=30.0)
    outcome = decide_outcome(child, None, timeout=0)
    assert isinstance(outcome, Fail) and outcome.cause == "protocol"
