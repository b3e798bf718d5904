import pytest

from supervisor.core.leases import fence_deadline, fence_margin, renew_interval, renewal_lag


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
