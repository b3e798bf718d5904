"""core/failover.py: a master change is seen, held for the longest lease, and raises
tokens past the old master's."""

from __future__ import annotations

from supervisor.core.failover import FAILOVER_MARGIN, Epoch, ended_by_failover, step_epoch

A, B = "run-a:replid-a", "run-b:replid-b"


def test_a_new_pool_starts_epoch_1_without_a_hold() -> None:
    step = step_epoch(None, A, has_leases=False, lease_ttl=10, now=1000)
    assert step.epoch == Epoch(master=A, number=1, seen_at=None, max_ttl=10)
    assert not step.changed and step.token_floor == 0
    assert not step.held(1000)


def test_the_same_master_changes_nothing() -> None:
    recorded = Epoch(master=A, number=3, seen_at=None, max_ttl=10)
    step = step_epoch(recorded, A, has_leases=True, lease_ttl=5, now=2000)
    assert step.epoch is recorded and not step.changed and not step.held(2000)


def test_another_master_starts_a_held_epoch_with_higher_tokens() -> None:
    recorded = Epoch(master=A, number=3, seen_at=None, max_ttl=10)
    step = step_epoch(recorded, B, has_leases=True, lease_ttl=5, now=2000)
    assert step.changed
    assert step.epoch == Epoch(master=B, number=4, seen_at=2000, max_ttl=10)
    assert step.epoch.hold_until == 2000 + 10 + FAILOVER_MARGIN  # the longest ttl, not 5
    assert step.held(2010) and not step.held(2000 + 10 + FAILOVER_MARGIN)
    assert step.token_floor == 4 << 32


def test_a_lost_record_on_a_pool_with_leases_is_a_change() -> None:
    step = step_epoch(None, B, has_leases=True, lease_ttl=7, now=50)
    assert step.changed and step.epoch.number == 1 and step.token_floor == 1 << 32
    assert step.epoch.hold_until == 50 + 7 + FAILOVER_MARGIN


def test_a_longer_ttl_widens_the_record_and_the_hold() -> None:
    recorded = Epoch(master=B, number=4, seen_at=2000, max_ttl=10)
    step = step_epoch(recorded, B, has_leases=True, lease_ttl=30, now=2001)
    assert not step.changed and step.token_floor == 0
    assert step.epoch.max_ttl == 30 and step.epoch.hold_until == 2030 + FAILOVER_MARGIN


def test_after_the_hold_claims_go_on() -> None:
    recorded = Epoch(master=B, number=4, seen_at=2000, max_ttl=10)
    step = step_epoch(recorded, B, has_leases=True, lease_ttl=10, now=2012)
    assert not step.held(2012) and not step.changed


def test_a_lease_that_ran_out_before_the_hold_ended_counts_no_loss() -> None:
    assert ended_by_failover(2005, 2011)
    assert ended_by_failover(2011, 2011)
    assert not ended_by_failover(2011.5, 2011)  # renewed on the new master, then lost
    assert not ended_by_failover(2005, None)  # no master change in this pool
    assert not ended_by_failover(None, 2011)
