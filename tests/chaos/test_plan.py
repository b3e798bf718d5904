"""The chaos run's plans: a seed replays the same schedule, faults come one at a time,
and the workload keeps its promises to the checker (notes stop well before a stop)."""

from __future__ import annotations

import itertools
import random

from tests.chaos.plan import (
    POSTGRES_FAULTS,
    QUIET_BEFORE_STOP,
    REDIS_FAULTS,
    plan_faults,
    plan_work,
)


def test_a_seed_replays_the_same_plans() -> None:
    def plans(seed: int) -> tuple[object, object]:
        rng = random.Random(seed)
        return (plan_faults(rng, 300, redis=True, lease_ttl=2), plan_work(rng, 300, "r"))

    assert plans(5) == plans(5)
    assert plans(5) != plans(6)


def test_faults_come_one_at_a_time_and_freezes_outlast_the_lease() -> None:
    faults = plan_faults(random.Random(3), 1800, redis=True, lease_ttl=2)
    assert {fault.kind for fault in faults} >= {*REDIS_FAULTS, "kill_supervisor", "drain"}
    for earlier, later in itertools.pairwise(faults):
        assert earlier.at + earlier.duration < later.at
    assert all(fault.duration > 2 for fault in faults
               if fault.kind in ("freeze_supervisor", "freeze_group"))


def test_a_sqlite_run_plans_no_redis_fault_and_more_supervisors_are_targets() -> None:
    faults = plan_faults(random.Random(3), 1800, redis=False, lease_ttl=2, supervisors=5)
    assert not {fault.kind for fault in faults} & set(REDIS_FAULTS)
    assert {fault.target for fault in faults} == {"a", "b", "c", "d", "e", "f", "all"}


def test_notes_stop_before_the_key_is_stopped_and_keys_are_unique() -> None:
    work = plan_work(random.Random(9), 600, "run")
    keys = [item.key for item in work if item.action == "dispatch"]
    assert len(keys) == len(set(keys))
    stops = {item.key: item.at for item in work if item.action == "stop"}
    for item in work:
        if item.action == "notify":
            assert item.at < stops.get(item.key, 600) - QUIET_BEFORE_STOP
    notes = [item.note for item in work if item.action == "notify" and item.key == keys[1]]
    assert notes == list(range(1, len(notes) + 1))


def test_with_overlap_redis_faults_run_in_a_lane_of_their_own() -> None:
    faults = plan_faults(random.Random(3), 600, redis=True, lease_ttl=2, overlap=True)
    lanes = {lane: [fault for fault in faults if fault.lane == lane] for lane in (0, 1)}
    assert {fault.kind for fault in lanes[1]} == set(REDIS_FAULTS)
    assert not {fault.kind for fault in lanes[0]} & set(REDIS_FAULTS)
    for lane in lanes.values():
        for earlier, later in itertools.pairwise(lane):
            assert earlier.at + earlier.duration < later.at
    assert plan_faults(random.Random(3), 600, redis=False, lease_ttl=2, overlap=True) == \
        plan_faults(random.Random(3), 600, redis=False, lease_ttl=2)


def test_a_postgres_plan_has_the_servers_faults_and_no_redis_fault() -> None:
    faults = plan_faults(random.Random(3), 1800, redis=False, postgres=True, lease_ttl=2)
    kinds = {fault.kind for fault in faults}
    assert set(POSTGRES_FAULTS) <= kinds
    assert not kinds & set(REDIS_FAULTS)
    assert all(fault.target == "postgres" for fault in faults if fault.kind in POSTGRES_FAULTS)


def test_postgres_faults_overlap_the_supervisors_faults_in_a_lane_of_their_own() -> None:
    faults = plan_faults(random.Random(3), 600, redis=False, postgres=True, lease_ttl=2,
                         overlap=True)
    assert {fault.lane for fault in faults if fault.kind in POSTGRES_FAULTS} == {1}
    assert {fault.lane for fault in faults if fault.kind not in POSTGRES_FAULTS} == {0}
