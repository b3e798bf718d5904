"""Supervisor membership and the pool snapshot."""

from __future__ import annotations

import anyio
import pytest

from supervisor.errors import SupervisorIdTaken
from supervisor.store.base import Store
from supervisor.store.records import Completion, JobStats
from tests.store.support import (
    LONG_TTL,
    OWNER,
    SHORT_TTL,
    claim,
    claim_as_supervisors_do,
    claim_one,
    dispatch_all,
    new_job,
    supervisor,
    wait_for_expiry,
)

pytestmark = pytest.mark.anyio


async def test_a_registered_supervisor_is_in_the_snapshot(store: Store) -> None:
    await store.register(supervisor("sup-a"))

    snapshot = await store.snapshot()

    assert snapshot.pool == store.pool
    assert [s.info for s in snapshot.supervisors] == [supervisor("sup-a")]
    assert 0 <= snapshot.supervisors[0].last_seen < 2
    assert snapshot.supervisors[0].running == 0


async def test_a_supervisors_handlers_and_rebalance_come_back_as_tuples(store: Store) -> None:
    info = supervisor("sup-a", handlers=("h1", "h2"), rebalance=("h1",))
    await store.register(info)

    (status,) = (await store.snapshot()).supervisors

    assert status.info == info
    assert (type(status.info.handlers), type(status.info.rebalance)) == (tuple, tuple)


async def test_another_live_instance_cannot_take_the_id(store: Store) -> None:
    await store.register(supervisor("sup-a", instance="i-1"))

    with pytest.raises(SupervisorIdTaken):
        await store.register(supervisor("sup-a", instance="i-2"))
    await store.register(supervisor("sup-a", instance="i-1"))


async def test_the_id_is_free_once_the_old_instance_is_silent(store: Store) -> None:
    await store.register(supervisor("sup-a", instance="i-1", lease_ttl=0.3))
    await anyio.sleep(0.5)

    await store.register(supervisor("sup-a", instance="i-2"))

    assert [s.info.instance for s in (await store.snapshot()).supervisors] == ["i-2"]


async def test_renew_keeps_the_supervisor_seen(store: Store) -> None:
    await store.register(supervisor("sup-a", instance="i-1", lease_ttl=0.4))
    await anyio.sleep(0.3)
    await store.renew("sup-a", "i-1", [], LONG_TTL, {})
    await anyio.sleep(0.3)

    with pytest.raises(SupervisorIdTaken):
        await store.register(supervisor("sup-a", instance="i-2"))


async def test_deregister_removes_only_its_own_instance(store: Store) -> None:
    await store.register(supervisor("sup-a", instance="i-1"))

    await store.deregister("sup-a", "i-other")
    assert len((await store.snapshot()).supervisors) == 1
    await store.deregister("sup-a", "i-1")
    assert (await store.snapshot()).supervisors == ()


async def test_snapshot_leaves_out_supervisors_silent_for_three_ttls(store: Store) -> None:
    await store.register(supervisor("sup-old", lease_ttl=0.2))
    await store.register(supervisor("sup-new"))
    await anyio.sleep(0.8)

    assert [s.info.id for s in (await store.snapshot()).supervisors] == ["sup-new"]


async def test_snapshot_counts_every_state_and_shows_running_jobs(store: Store) -> None:
    await store.register(supervisor("sup-a"))
    await dispatch_all(store, ["ok", "bad", "busy", "halted", "waiting"])
    ok, bad, busy = (await claim(store, 3, owner="sup-a")).jobs
    await store.complete(ok.lease, b"1")
    await store.fail(bad.lease, "broken", final=True, retry_delay=0)
    stats = JobStats(pid=5151, rss_bytes=2048, cpu_percent=50.0)
    await store.renew("sup-a", "i-1", [busy.lease], LONG_TTL, {"busy": stats})
    await store.stop("halted")

    snapshot = await store.snapshot()

    assert snapshot.counts == {
        "pending": 1, "running": 1, "succeeded": 1, "failed": 1, "stopped": 1,
    }
    assert [(r.key, r.supervisor, r.stats) for r in snapshot.running] == [
        ("busy", "sup-a", stats)
    ]
    running = snapshot.running[0]
    assert running.lease_deadline is not None
    assert running.lease_deadline - snapshot.store_time == pytest.approx(LONG_TTL, abs=1)
    assert [(s.info.id, s.running) for s in snapshot.supervisors] == [("sup-a", 1)]


async def test_renew_by_another_instance_is_told_the_id_is_taken(store: Store) -> None:
    await store.register(supervisor("sup-a", instance="i-1", lease_ttl=0.4))
    await store.dispatch(new_job("k1"))
    job = await claim_one(store, owner="sup-a", lease_ttl=5)
    await anyio.sleep(0.25)

    result = await store.renew("sup-a", "i-2", [job.lease], LONG_TTL, {})

    assert (result.membership, result.lost) == ("taken", frozenset())
    record = await store.job("k1")
    assert record.lease_deadline is not None
    assert record.lease_deadline == pytest.approx(result.store_time + LONG_TTL, abs=0.01)
    await anyio.sleep(0.25)  # i-1 was last seen 0.5 s ago: its seen time was not refreshed
    await store.register(supervisor("sup-a", instance="i-2"))
    assert (await store.renew("sup-a", "i-1", [], LONG_TTL, {})).membership == "taken"
    assert (await store.renew("sup-a", "i-2", [], LONG_TTL, {})).membership == "ok"


async def test_renew_without_an_entry_is_told_it_is_missing(store: Store) -> None:
    assert (await store.renew("sup-a", "i-1", [], LONG_TTL, {})).membership == "missing"
    assert (await store.snapshot()).supervisors == ()
    await store.register(supervisor("sup-a", instance="i-1"))
    assert (await store.renew("sup-a", "i-1", [], LONG_TTL, {})).membership == "ok"
    await store.deregister("sup-a", "i-1")
    assert (await store.renew("sup-a", "i-1", [], LONG_TTL, {})).membership == "missing"
    assert (await store.snapshot()).supervisors == ()


async def test_a_silent_supervisor_leaves_the_snapshot_but_keeps_its_entry(
    store: Store,
) -> None:
    await store.register(supervisor("sup-a", instance="i-1", lease_ttl=0.2))
    await anyio.sleep(0.8)

    assert (await store.snapshot()).supervisors == ()
    assert (await store.snapshot()).supervisors == ()

    assert (await store.renew("sup-a", "i-1", [], 0.2, {})).membership == "ok"
    assert [s.info.id for s in (await store.snapshot()).supervisors] == ["sup-a"]


async def test_snapshot_reports_a_healthy_store_since_it_last_started_taking_writes(
    store: Store,
) -> None:
    first = await store.snapshot()
    second = await store.snapshot()

    assert (first.store.state, first.store.error) == ("ok", None)
    # Since the pool's first write (a store may write when it opens), or now if none:
    # moments ago either way, however slowly this test ran.
    assert first.store_time - 5.0 < first.store.since <= first.store_time + 0.01
    assert second.store == first.store


async def running_per_owner(store: Store) -> dict[str, dict[str, int]]:
    """The running records counted per owner and handler: what `members` must say."""
    counted: dict[str, dict[str, int]] = {}
    for record in await store.jobs("running"):
        assert record.supervisor is not None
        per_handler = counted.setdefault(record.supervisor, {})
        per_handler[record.handler] = per_handler.get(record.handler, 0) + 1
    return counted


async def members_say(store: Store) -> dict[str, dict[str, int]]:
    return {m.info.id: m.running_by_handler for m in (await store.members()).members
            if m.running}


async def test_members_count_every_run_started_and_ended_each_way(store: Store) -> None:
    other = "sup-b"
    for owner in (OWNER, other):
        await store.register(supervisor(owner, handlers=("thumbnail", "resize")))
    await dispatch_all(store, [f"j{n}" for n in range(8)])
    await store.dispatch(new_job("r1", handler="resize"))
    await store.dispatch(new_job("last-try", max_attempts=1))
    jobs = {job.key: job for job in (await claim(store, 10, handlers=("thumbnail", "resize"))).jobs}
    assert await members_say(store) == await running_per_owner(store) == {
        OWNER: {"thumbnail": 9, "resize": 1}}

    await store.complete(jobs["j0"].lease, b"1")
    await store.fail(jobs["j1"].lease, "retried", final=False, retry_delay=60)
    await store.fail(jobs["last-try"].lease, "for good", final=True, retry_delay=0)
    await store.release(jobs["j2"].lease)
    await store.release(jobs["j3"].lease, reserve_for=other, reserve_ttl=LONG_TTL)
    await store.stop("j4")
    await store.finish_stopped(jobs["j4"].lease, "stopped")
    await store.stop("j5")
    await store.release(jobs["j5"].lease)  # released with a stop asked for: stopped
    completing = (Completion(jobs["j6"].lease, b"2"),)
    moved = (await store.claim(other, ("thumbnail",), 1, LONG_TTL, 3, completing)).jobs
    assert [job.key for job in moved] == ["j3"]
    # j6 completed by sup-b's claim is refused (not its lease); completed by its owner:
    await store.claim(OWNER, ("thumbnail",), 0, LONG_TTL, 3, completing)

    assert await members_say(store) == await running_per_owner(store) == {
        OWNER: {"thumbnail": 1, "resize": 1}, other: {"thumbnail": 1}}


async def test_members_count_a_run_recovered_after_its_lease_ran_out(store: Store) -> None:
    await store.register(supervisor(OWNER))
    await store.register(supervisor("sup-b"))
    await dispatch_all(store, ["lost", "kept"])
    await claim_one(store, lease_ttl=SHORT_TTL)
    await claim_one(store, owner="sup-b")
    await wait_for_expiry()

    await claim_as_supervisors_do(store, 0, owner="sup-b")

    assert (await store.job("lost")).state == "pending"
    assert await members_say(store) == await running_per_owner(store) == {
        "sup-b": {"thumbnail": 1}}
