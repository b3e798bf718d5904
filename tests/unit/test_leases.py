import pytest

from supervisor.core.leases import (
    fence_deadline,
    fence_margin,
    outcome_deadline,
    renew_interval,
    renewal_lag,
)


@pytest.mark.parametrize("ttl", [1.0, 2.0, 10.0, 60.0])
def test_fence_fires_before_the_store_lease_expires(ttl: float) -> None:
    sent_at = 1000.0
    store_deadline_at_the_earliest = sent_at + ttl
    assert fence_deadline(sent_at, ttl) < store_deadline_at_the_earliest
    assert fence_deadline(sent_at, ttl) <= store_deadline_at_the_earliest - fence_margin(ttl)


@pytest.mark.parametrize("ttl", [1.0, 2.0, 10.0, 60.0])
def test_two_renewals_can_fail_before_the_fence_fires(ttl: float) -> None:
    # renewal k succeeds at t=0; renewals at 1x and 2x the interval fail; the fence
    # must not fire before the third one would have gone out.
    assert fence_deadline(0.0, ttl) > 2 * renew_interval(ttl)


def test_margin_is_bounded() -> None:
    assert fence_margin(1.0) == 0.25
    assert fence_margin(100.0) == 1.0


def test_renewal_lag_is_never_negative() -> None:
    assert renewal_lag(10.0, 9.5) == 0.0
    assert renewal_lag(10.0, 10.25) == 0.25


def test_an_outcome_is_tried_until_a_late_renewal_may_have_run_out() -> None:
    fence_at, ttl = 100.0, 8.0
    # The store's deadline is the fence's margin after the fence; a renewal it took and
    # runs just before then pushes it one ttl further.
    assert outcome_deadline(fence_at, ttl, draining=False) == fence_at + fence_margin(ttl) + ttl


def test_a_draining_supervisor_tries_an_outcome_only_until_the_fence() -> None:
    assert outcome_deadline(100.0, 8.0, draining=True) == 100.0
