"""When the supervisor may tell systemd it is alive: WATCHDOG=1 decisions."""

from supervisor.core.watchdog import next_watchdog_tick, reason_to_withhold_ping, watchdog_interval


def test_pings_go_out_at_half_the_watchdog_timeout() -> None:
    assert watchdog_interval("30000000", None, pid=42) == 15.0
    assert watchdog_interval("1000000", "42", pid=42) == 0.5


def test_no_watchdog_when_unset_meant_for_another_process_or_nonsense() -> None:
    assert watchdog_interval(None, None, pid=42) is None
    assert watchdog_interval("30000000", "41", pid=42) is None
    assert watchdog_interval("0", None, pid=42) is None
    assert watchdog_interval("soon", None, pid=42) is None
    assert watchdog_interval("30000000", "not a pid", pid=42) is None


def test_a_tick_on_time_with_a_fork_server_that_answered_pings() -> None:
    assert reason_to_withhold_ping(
        now=10.1, due=10.0, interval=1.0, fork_server_answered=True
    ) is None


def test_a_late_tick_withholds_the_ping() -> None:
    reason = reason_to_withhold_ping(now=12.6, due=10.0, interval=1.0, fork_server_answered=True)
    assert reason is not None
    assert "event loop" in reason and "2.6 s late" in reason


def test_a_tick_late_by_less_than_half_an_interval_still_pings() -> None:
    assert reason_to_withhold_ping(
        now=10.49, due=10.0, interval=1.0, fork_server_answered=True
    ) is None


def test_a_fork_server_that_did_not_answer_withholds_the_ping() -> None:
    reason = reason_to_withhold_ping(now=10.0, due=10.0, interval=1.0, fork_server_answered=False)
    assert reason is not None and "fork server" in reason


def test_ticks_keep_their_rhythm_and_restart_after_a_stall() -> None:
    assert next_watchdog_tick(now=10.2, due=10.0, interval=1.0) == 11.0
    # Ticks missed during a stall are not made up in a burst.
    assert next_watchdog_tick(now=13.5, due=10.0, interval=1.0) == 14.5
