"""core/limits.py: the pool-wide limit and rate decisions, by property."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.core.limits import Due, Limits, Rate, Usage, next_rate_slot, startable
from supervisor.errors import ConfigError

HANDLERS = ("a", "b")
GROUPS = (None, "g1", "g2")

dues = st.lists(st.builds(Due, key=st.uuids().map(str), handler=st.sampled_from(HANDLERS),
                          group=st.sampled_from(GROUPS)), max_size=30)
limits = st.builds(Limits, max_running=st.none() | st.integers(1, 5),
                   max_running_per_group=st.none() | st.integers(1, 3),
                   rate=st.none() | st.builds(Rate, st.integers(1, 5),
                                              st.sampled_from([1.0, 60.0])))


def fresh_usage() -> Usage:
    return Usage(running={}, running_in_group={}, recent_starts={})


@given(dues, st.integers(0, 40), limits, st.integers(0, 6))
def test_a_claim_never_takes_a_handler_past_its_limits(
    due: list[Due], count: int, limit: Limits, already: int
) -> None:
    usage = Usage(running={"a": already}, running_in_group={("a", "g1"): already},
                  recent_starts={"a": [99.5] * already})

    chosen = startable(due, count, {"a": limit}, usage, now=100.0)

    assert len(chosen) <= count
    started_a = [job for job in chosen if job.handler == "a"]
    if limit.max_running is not None:
        assert already + len(started_a) <= max(limit.max_running, already)
    if limit.max_running_per_group is not None:
        for group in ("g1", "g2"):
            before = already if group == "g1" else 0
            in_group = sum(1 for job in started_a if job.group == group)
            assert before + in_group <= max(limit.max_running_per_group, before)
    if limit.rate is not None:
        assert already + len(started_a) <= max(limit.rate.starts, already)


@given(dues, st.integers(0, 40))
def test_without_limits_a_claim_takes_the_first_jobs_in_order(due: list[Due], count: int) -> None:
    assert startable(due, count, {}, fresh_usage(), now=0.0) == due[:count]


@given(dues, st.integers(0, 40), limits)
def test_what_a_claim_skips_is_only_what_a_limit_refuses(
    due: list[Due], count: int, limit: Limits
) -> None:
    # Handler b has no limits: every b job before the claim fills up is taken.
    chosen = startable(due, count, {"a": limit}, fresh_usage(), now=0.0)
    if len(chosen) < count:
        assert [job for job in due if job.handler == "b"] == \
            [job for job in chosen if job.handler == "b"]


@given(st.lists(st.integers(0, 200).map(float), max_size=20), st.integers(1, 5),
       st.integers(0, 200).map(float))
def test_the_next_rate_slot_is_when_the_window_has_room_again(
    starts: list[float], n: int, now: float
) -> None:
    rate = Rate(n, 60.0)
    inside = [at for at in starts if now - 60 < at <= now]
    slot = next_rate_slot(starts, now, rate)
    if len(inside) < n:
        assert slot is None
    else:
        assert slot is not None and now < slot
        assert sum(1 for at in inside if slot - 60 < at) < n


@pytest.mark.parametrize(("text", "rate"), [("20/s", Rate(20, 1.0)), ("300/m", Rate(300, 60.0)),
                                            (" 1000 / h ", Rate(1000, 3600.0))])
def test_rates_are_read_from_n_per_unit(text: str, rate: Rate) -> None:
    assert Rate.parse(text) == rate


@pytest.mark.parametrize("text", ["0/s", "-1/s", "5", "5/d", "1.5/s", "five/s", ""])
def test_a_bad_rate_names_what_is_wrong(text: str) -> None:
    with pytest.raises(ConfigError, match="N/s, N/m or N/h"):
        Rate.parse(text)
