"""Small builders shared by the conformance tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence

import anyio

from supervisor.core.limits import Limits
from supervisor.store.base import Store
from supervisor.store.records import (
    ClaimBatch,
    ClaimedJob,
    DispatchRequest,
    EventKind,
    StoreEvent,
    SupervisorInfo,
)

OWNER = "sup-a"
HANDLER = "thumbnail"
LONG_TTL = 30.0
SHORT_TTL = 0.5
EXPIRY_MARGIN = 0.25  # sleep this much past a short TTL before looking


def new_job(
    key: str, *, handler: str = HANDLER, payload: bytes = b'{"n": 1}', max_attempts: int = 3
) -> DispatchRequest:
    return DispatchRequest(key=key, handler=handler, payload=payload, max_attempts=max_attempts)


async def dispatch_all(store: Store, keys: Sequence[str]) -> None:
    for key in keys:
        await store.dispatch(new_job(key))


async def claim(
    store: Store,
    count: int = 1,
    *,
    owner: str = OWNER,
    handlers: Sequence[str] = (HANDLER,),
    lease_ttl: float = LONG_TTL,
    max_lease_losses: int = 3,
    limits: Mapping[str, Limits] | None = None,
) -> ClaimBatch:
    return await store.claim(owner, handlers, count, lease_ttl, max_lease_losses,
                             limits=limits)


async def wait_for_work(store: Store, *, owner: str = OWNER, lease_ttl: float = LONG_TTL) -> None:
    """A claim with room that finds nothing: `owner` then waits for work of HANDLER, and
    the next job made claimable wakes it."""
    batch = await claim(store, 1, owner=owner, lease_ttl=lease_ttl)
    assert not batch.jobs, batch


WITNESS_CLAIMS = 10


async def claim_one(
    store: Store, *, owner: str = OWNER, lease_ttl: float = LONG_TTL, max_lease_losses: int = 3
) -> ClaimedJob:
    """The one job a claim starts. A lease that ended while nobody claimed for more than
    MIN_CLAIM_GAP (a loaded machine's test, asleep past its expiry) waits for a witness:
    claimed again every half second, as a supervisor does, until it is judged."""
    for _ in range(WITNESS_CLAIMS):
        batch = await claim(
            store, 1, owner=owner, lease_ttl=lease_ttl, max_lease_losses=max_lease_losses
        )
        if batch.jobs or not batch.left_to_witness:
            break
        await anyio.sleep(0.5)
    assert len(batch.jobs) == 1, batch
    return batch.jobs[0]


async def wait_for_expiry(ttl: float = SHORT_TTL) -> None:
    await anyio.sleep(ttl + EXPIRY_MARGIN)


def supervisor(
    id: str = OWNER,
    *,
    instance: str = "i-1",
    lease_ttl: float = LONG_TTL,
    capacity: int = 4,
    handlers: tuple[str, ...] = (),
    rebalance: tuple[str, ...] = (),
) -> SupervisorInfo:
    return SupervisorInfo(
        id=id, instance=instance, host=f"host-{id}", pid=4242, capacity=capacity,
        lease_ttl=lease_ttl, started_at=1_700_000_000.0, handlers=handlers,
        rebalance=rebalance,
    )


async def next_event(
    events: AsyncIterator[StoreEvent], kind: EventKind, *, within: float = 5.0
) -> StoreEvent:
    """The next event of `kind`, skipping others."""
    with anyio.fail_after(within):
        while True:
            event = await anext(events)
            if event.kind == kind:
                return event


async def claim_as_supervisors_do(
    store: Store,
    count: int = 1,
    *,
    owner: str = OWNER,
    lease_ttl: float = LONG_TTL,
    max_lease_losses: int = 3,
    limits: Mapping[str, Limits] | None = None,
    within: float = 10.0,
) -> ClaimBatch:
    """Claim every half second, as a supervisor does, until a claim recovers a lease or
    starts a job; that claim's batch.  A test that claims once after `wait_for_expiry`
    and expects the lease recovered fails on a loaded machine: a claim that comes
    MIN_CLAIM_GAP or more after the pool's last one leaves a lease that ended in that gap
    (or within a lease ttl after it) to a later claim, for up to JUDGE_AFTER_GAP
    (left_to_witness).  `within` bounds the claims made (at half a second apart, at least
    that long), well past JUDGE_AFTER_GAP."""
    for _ in range(int(within / 0.5)):
        batch = await claim(store, count, owner=owner, lease_ttl=lease_ttl,
                            max_lease_losses=max_lease_losses, limits=limits)
        if batch.recovered or batch.jobs:
            return batch
        await anyio.sleep(0.5)
    raise AssertionError(f"no claim of {owner} recovered or started anything in {within} s")
