"""Which tick a supervisor fires, and when: the pure decision, with explicit times."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.cadence import Cron, tick_label
from supervisor.core.ticks import (
    NEW_SCHEDULE_GRACE,
    Every,
    Fire,
    Wait,
    count_between,
    decide_again,
    decide_tick,
    fingerprint,
    jitter_offset,
)


def at(text: str, zone: str = "UTC") -> float:
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


def local(timestamp: float, zone: str) -> str:
    return datetime.fromtimestamp(timestamp, ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %Z")


def test_every_fires_the_latest_tick_once_and_then_waits_for_the_next() -> None:
    every = Every(300)
    decision = decide_tick(every, name="s", jitter=0, last_tick=600.0, now=1000.0)
    assert decision == Fire(tick=900.0, not_before=900.0, missed=0)
    assert decide_tick(every, name="s", jitter=0, last_tick=900.0, now=1000.0) == Wait(until=1200.0)


def test_ticks_missed_while_no_supervisor_ran_are_counted_not_replayed() -> None:
    decision = decide_tick(Every(60), name="s", jitter=0, last_tick=0.0, now=600.5)
    assert decision == Fire(tick=600.0, not_before=600.0, missed=9)


def test_a_stale_decision_is_decided_again_from_the_tick_the_store_returned() -> None:
    """Two supervisors read last_tick 0 (every 300 s); one fired 2700 counting 8 missed
    ticks; the other, at 3000, counted 9 from its stale read and was refused."""
    every = Every(300)
    stale = decide_tick(every, name="s", jitter=0, last_tick=0.0, now=3000.0)
    assert stale == Fire(tick=3000.0, not_before=3000.0, missed=9)
    again = decide_again(every, name="s", jitter=0, refused=3000.0, last_tick=2700.0,
                         now=3001.0)
    assert again == Fire(tick=3000.0, not_before=3000.0, missed=0)
    assert 3 + 8 + again.missed == 11  # fired 0, 2700, 3000; missed 300 .. 2400


def test_a_stale_decision_for_a_released_tick_fires_it_again() -> None:
    """The store answers "stale" rather than "taken" for the refused tick itself only
    when it was given back: it fires again, counting nothing missed."""
    every = Every(300)
    again = decide_again(every, name="s", jitter=0, refused=900.0, last_tick=900.0,
                         now=1000.0)
    assert again == Fire(tick=900.0, not_before=900.0, missed=0)


def test_a_new_schedule_fires_a_fresh_tick_but_not_an_old_one() -> None:
    fresh = decide_tick(Every(3600), name="s", jitter=0, last_tick=None, now=3600.0 + 5)
    assert fresh == Fire(tick=3600.0, not_before=3600.0, missed=0)
    stale = decide_tick(Every(3600), name="s", jitter=0, last_tick=None,
                        now=3600.0 + NEW_SCHEDULE_GRACE + 1)
    assert stale == Wait(until=7200.0)


def test_a_new_daily_cron_schedule_does_not_fire_this_mornings_tick_at_noon() -> None:
    cron = Cron("0 3 * * *")
    decision = decide_tick(cron, name="s", jitter=0, last_tick=None, now=at("2026-11-25T12:00:00"))
    assert decision == Wait(until=at("2026-11-26T03:00:00"))


def test_jitter_delays_a_tick_alike_for_everyone_and_within_bounds() -> None:
    offset = jitter_offset("reindex", 900.0, 10.0)
    assert 0 <= offset < 10
    assert offset == jitter_offset("reindex", 900.0, 10.0)
    assert offset != jitter_offset("reindex", 1200.0, 10.0)
    before = decide_tick(Every(300), name="reindex", jitter=10, last_tick=600.0,
                         now=900.0 + offset - 0.01)
    assert before == Wait(until=900.0 + offset)
    due = decide_tick(Every(300), name="reindex", jitter=10, last_tick=600.0, now=900.0 + offset)
    assert due == Fire(tick=900.0, not_before=900.0 + offset, missed=0)


@given(st.floats(1, 1e9), st.integers(1, 10_000), st.floats(0, 0.99))
def test_every_decision_fires_a_tick_not_after_now_and_waits_for_a_later_one(
    now: float, seconds: int, jitter_part: float
) -> None:
    jitter = jitter_part * seconds
    last = Every(seconds).latest(now - 3 * seconds)
    decision = decide_tick(Every(seconds), name="p", jitter=jitter, last_tick=last, now=now)
    if isinstance(decision, Fire):
        assert last is not None and last < decision.tick <= decision.not_before <= now
    else:
        assert decision.until > now


def test_count_between_cron_ticks() -> None:
    assert count_between(Cron("*/5 * * * *"), at("2026-01-01T00:00"), at("2026-01-01T01:00")) == 11


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        # month ends: the 31st skips months without one; Feb 29 only in leap years
        ("0 0 31 * *", "2026-04-01T00:00", "2026-05-31T00:00"),
        ("0 12 29 2 *", "2026-03-01T00:00", "2028-02-29T12:00"),
        ("59 23 28-31 * *", "2026-02-27T00:00", "2026-02-28T23:59"),
        # day of week: 1 = Monday; 2026-11-25 is a Wednesday
        ("30 9 * * 1", "2026-11-25T10:00", "2026-11-30T09:30"),
        ("0 8 * * 1-5", "2026-11-28T00:00", "2026-11-30T08:00"),
        # day of month OR day of week when both are restricted (Debian cron)
        ("0 0 1 * 5", "2026-11-25T00:00", "2026-11-27T00:00"),
    ],
)
def test_cron_next_times(expression: str, after: str, expected: str) -> None:
    assert Cron(expression).following(at(after)) == at(expected)


def test_cron_latest_includes_a_tick_at_the_very_second() -> None:
    cron = Cron("*/5 * * * *")
    assert cron.latest(at("2026-11-25T10:05:00")) == at("2026-11-25T10:05:00")
    assert cron.latest(at("2026-11-25T10:04:59.9")) == at("2026-11-25T10:00:00")


def test_cron_in_a_spring_forward_gap_runs_at_the_first_minute_after_it() -> None:
    # Europe/Berlin skips 02:00-03:00 on 2026-03-29.
    cron = Cron("30 2 * * *", "Europe/Berlin")
    first = cron.following(at("2026-03-28T12:00", "Europe/Berlin"))
    assert local(first, "Europe/Berlin") == "2026-03-29 03:00 CEST"
    assert local(cron.following(first), "Europe/Berlin") == "2026-03-30 02:30 CEST"


def test_cron_at_a_repeated_time_runs_once_when_clocks_fall_back() -> None:
    # Europe/Berlin repeats 02:00-03:00 on 2026-10-25.
    cron = Cron("30 2 * * *", "Europe/Berlin")
    first = cron.following(at("2026-10-24T12:00", "Europe/Berlin"))
    assert local(first, "Europe/Berlin") == "2026-10-25 02:30 CEST"
    assert local(cron.following(first), "Europe/Berlin") == "2026-10-26 02:30 CET"


def test_cron_every_half_hour_keeps_running_through_the_repeated_hour() -> None:
    cron = Cron("*/30 * * * *", "Europe/Berlin")
    tick = at("2026-10-25T01:45", "Europe/Berlin")
    seen = []
    for _ in range(4):
        tick = cron.following(tick)
        seen.append(tick)
    assert [b - a for a, b in itertools.pairwise(seen)] == [1800.0] * 3


def test_tick_labels_are_utc_and_sortable() -> None:
    assert tick_label(at("2026-11-25T03:00:00")) == "20261125T030000Z"
    assert tick_label(1.5) == "19700101T000001.500000Z"
    assert datetime.fromtimestamp(0, UTC).year == 1970


def test_fingerprint_changes_with_any_setting() -> None:
    base = {"every": 300.0, "handler": "reindex", "payload": {"full": False}}
    assert fingerprint(base) == fingerprint(dict(reversed(base.items())))
    assert fingerprint(base) != fingerprint({**base, "payload": {"full": True}})
