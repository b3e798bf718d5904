"""The registry of held runs: a key claimed again with a new token while its older run
is still ending here must not be dropped (it would sit unrun until its lease expired)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from supervisor.config import HandlerConfig
from supervisor.core.admission import Admission
from supervisor.job.running import Registry, RunningJob
from supervisor.store.records import ClaimedJob


def run_of(key: str, token: int) -> RunningJob:
    claimed = ClaimedJob(key=key, handler="h", payload=b"null", token=token, attempt=1,
                         max_attempts=3, lease_deadline=0.0, owner="a")
    handler = HandlerConfig(name="h", path=Path("/h.py"), rebalance=False)
    fork_server: Any = None
    return RunningJob(claimed=claimed, handler=handler, fork_server=fork_server, fence_at=0.0)


def test_a_new_token_for_a_key_still_ending_here_is_held_behind_it() -> None:
    freed: list[int] = []
    registry = Registry(slot_freed=lambda: freed.append(1))
    old, new = run_of("k", 1), run_of("k", 2)

    assert registry.add(old) is Admission.START
    assert registry.add(new) is Admission.AFTER_OLDER
    assert registry.get("k") is new
    assert registry.older_runs(new) == [old]

    registry.remove(old)
    assert old.gone.is_set()
    assert registry.older_runs(new) == []
    assert registry.get("k") is new
    assert len(registry) == 1 and freed


def test_the_same_claim_twice_is_held_once() -> None:
    registry = Registry(slot_freed=lambda: None)
    assert registry.add(run_of("k", 5)) is Admission.START
    assert registry.add(run_of("k", 5)) is Admission.DUPLICATE
    assert registry.add(run_of("k", 4)) is Admission.STALE
    assert len(registry) == 1
