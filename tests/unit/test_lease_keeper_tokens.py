"""The lease keeper acts on a lost lease by its token: when an old run of a key (its
lease recovered) and the new run of the same key are both held here, a renewal that
finds the old token lost stops the old run only."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from supervisor.config import HandlerConfig
from supervisor.job.lease_keeper import LeaseKeeper
from supervisor.job.running import Registry, RunningJob
from supervisor.store.records import ClaimedJob, JobStats, Lease, RenewResult

pytestmark = pytest.mark.anyio


def run_of(key: str, token: int) -> RunningJob:
    claimed = ClaimedJob(key=key, handler="h", payload=b"null", token=token, attempt=1,
                         max_attempts=3, lease_deadline=0.0, owner="sup-a")
    handler = HandlerConfig(name="h", path=Path("/h.py"), rebalance=False)
    fork_server: Any = None
    return RunningJob(claimed=claimed, handler=handler, fork_server=fork_server, fence_at=0.0)


class OneTokenPerKey:
    """A store that holds the newest token of each key: any other comes back lost; the
    held one has a stop asked for and notes waiting."""

    def __init__(self, held: dict[str, int]) -> None:
        self.held = held

    async def renew(self, owner: str, instance: str, leases: Sequence[Lease],
                    lease_ttl: float, stats: dict[str, JobStats]) -> RenewResult:
        renewed = [lease for lease in leases if self.held.get(lease.key) == lease.token]
        return RenewResult(
            lost=frozenset((lease.key, lease.token) for lease in leases
                           if lease not in renewed),
            stop_requested=frozenset(lease.key for lease in renewed),
            notified=frozenset(lease.key for lease in renewed),
            store_time=0.0,
        )


async def test_an_old_token_lost_stops_only_the_old_run_of_the_key() -> None:
    registry = Registry(slot_freed=lambda: None)
    old, new = run_of("k", 1), run_of("k", 2)
    registry.add(old)
    registry.add(new)
    store: Any = OneTokenPerKey({"k": 2})
    keeper = LeaseKeeper(store=store, registry=registry, owner="sup-a", instance="i-1",
                         lease_ttl=30.0, on_membership=lambda state: None)

    await keeper.renew_once()

    assert old.lease_lost and not new.lease_lost
    assert keeper.stats.leases_lost == 1
    assert new.fence_at > 0.0 and old.fence_at == 0.0  # only the held lease's fence moves
    assert new.stop_wanted.is_set() and new.notes_waiting.rang
    assert not old.notes_waiting.rang  # the key's notes are the new run's
