"""Every job keeps its history: the events of its record, oldest first, written in the
same atomic step as the change they describe, the newest HISTORY_LIMIT kept, gone with
the record, and begun anew by a new dispatch of the key."""

from __future__ import annotations

import anyio
import pytest

from supervisor.errors import JobNotFound, StaleToken
from supervisor.store.base import Store
from supervisor.store.policy import HISTORY_LIMIT
from supervisor.store.records import Completion, DispatchRequest, JobStats, TickRequest
from tests.store.conftest import Connect
from tests.store.support import (
    OWNER,
    SHORT_TTL,
    claim,
    claim_as_supervisors_do,
    claim_one,
    new_job,
    supervisor,
    wait_for_expiry,
)

pytestmark = pytest.mark.anyio

OTHER = "sup-b"


async def history(store: Store, key: str) -> list[tuple[str, str | None, int | None, str | None]]:
    return [(e.event, e.supervisor, e.token, e.detail) for e in (await store.job(key)).events]


async def test_a_run_that_succeeds_shows_dispatch_start_and_success(store: Store) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    await store.complete(job.lease, b"{}")

    record = await store.job("k")

    assert await history(store, "k") == [
        ("dispatched", None, None, None),
        ("started", OWNER, job.token, "attempt 1"),
        ("succeeded", OWNER, job.token, None),
    ]
    times = [event.at for event in record.events]
    assert times == sorted(times)
    assert times[0] == pytest.approx(record.created_at, abs=0.01)
    assert record.to_json()["events"][1] == {
        "at": times[1], "event": "started", "supervisor": OWNER, "token": job.token,
        "detail": "attempt 1"}


async def test_a_completion_carried_by_a_claim_is_in_the_history(store: Store) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    await store.claim(OWNER, ["thumbnail"], 0, 30.0, 3, completing=[Completion(job.lease, b"1")])

    assert [event for event, *_ in await history(store, "k")][-1] == "succeeded"


async def test_the_first_pid_reported_goes_into_the_start(store: Store) -> None:
    await store.register(supervisor())
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    for pid in (4242, 4343):
        await store.renew(OWNER, "i-1", [job.lease], 30.0, {"k": JobStats(pid=pid)})

    assert (await history(store, "k"))[-1] == ("started", OWNER, job.token,
                                                "attempt 1, pid 4242")


async def test_failed_attempts_show_the_first_line_of_their_error(store: Store) -> None:
    await store.dispatch(new_job("k", max_attempts=2))
    first = await claim_one(store)
    await store.fail(first.lease, "ValueError: bad\nTraceback ...", final=False, retry_delay=0)
    second = await claim_one(store)
    await store.fail(second.lease, "KeyError: x\nmore", final=False, retry_delay=0)

    events = await history(store, "k")

    assert [event for event, *_ in events] == [
        "dispatched", "started", "failed", "started", "failed"]
    assert events[2][:3] == ("failed", OWNER, first.token)
    assert events[2][3] is not None and events[2][3].startswith("ValueError: bad")
    assert "\n" not in events[2][3] and "retry" in events[2][3]
    assert events[3] == ("started", OWNER, second.token, "attempt 2")
    assert events[4] == ("failed", OWNER, second.token, "KeyError: x")


async def test_a_release_says_why_and_a_move_names_its_target(store: Store) -> None:
    await store.dispatch(new_job("k"))
    first = await claim_one(store)
    await store.release(first.lease, reason="drain")
    second = await claim_one(store)
    await store.release(second.lease, reserve_for=OTHER, reserve_ttl=30.0, reason="rebalance")
    third = await claim_one(store, owner=OTHER)

    assert (await history(store, "k"))[1:] == [
        ("started", OWNER, first.token, "attempt 1"),
        ("released", OWNER, first.token, "drain"),
        ("started", OWNER, second.token, "attempt 1"),
        ("moved", OWNER, second.token, f"to {OTHER}: rebalance"),
        ("started", OTHER, third.token, "attempt 1"),
    ]


async def test_a_stop_shows_stopping_then_stopped(store: Store) -> None:
    await store.dispatch(new_job("run"))
    await store.dispatch(new_job("wait"))
    job = await claim_one(store)
    await store.stop("run")
    await store.finish_stopped(job.lease, "stop")
    await store.stop("wait")

    assert (await history(store, "run"))[2:] == [
        ("stopping", OWNER, job.token, "stop"),
        ("stopped", OWNER, job.token, "stop"),
    ]
    assert (await history(store, "wait"))[1:] == [("stopped", None, None, "stopped while pending")]


async def test_a_lost_lease_names_its_holder_and_what_followed(store: Store) -> None:
    await store.dispatch(new_job("k"))
    lost = await claim_one(store, lease_ttl=SHORT_TTL)
    await wait_for_expiry()
    again = await claim_one(store, owner=OTHER)

    events = await history(store, "k")

    assert [event[:3] for event in events[2:]] == [
        ("lease_lost", OWNER, lost.token), ("started", OTHER, again.token)]
    assert events[2][3] is not None and "requeued" in events[2][3]
    assert "counted" in events[2][3]


async def test_a_retry_keeps_the_history_and_adds_to_it(store: Store) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    await store.fail(job.lease, "boom", final=True, retry_delay=0)
    await store.retry("k")

    assert [event for event, *_ in await history(store, "k")] == [
        "dispatched", "started", "failed", "retried"]
    assert (await history(store, "k"))[-1] == ("retried", None, None, None)


async def test_the_newest_events_are_kept(store: Store) -> None:
    await store.dispatch(new_job("k"))
    tokens = []
    for _ in range(HISTORY_LIMIT // 2 + 5):
        job = await claim_one(store)
        tokens.append(job.token)
        await store.release(job.lease, reason=f"round {len(tokens)}")

    events = await history(store, "k")

    assert len(events) == HISTORY_LIMIT
    assert events[-1] == ("released", OWNER, tokens[-1], f"round {len(tokens)}")
    assert events[0][0] != "dispatched"


async def test_a_new_dispatch_of_a_finished_key_starts_a_fresh_history(store: Store) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    await store.complete(job.lease, b"{}")
    await store.dispatch(new_job("k"))

    assert await history(store, "k") == [("dispatched", None, None, None)]


async def test_the_history_goes_with_its_record(connect: Connect) -> None:
    store = await connect(retention=0.3)
    try:
        await store.dispatch(new_job("k"))
        job = await claim_one(store)
        await store.complete(job.lease, b"{}")
        await anyio.sleep(0.5)
        await store.jobs()  # drops expired records
        with pytest.raises(JobNotFound):
            await store.job("k")
        await store.dispatch(new_job("k"))
        assert await history(store, "k") == [("dispatched", None, None, None)]
    finally:
        await store.close()


async def test_a_schedule_s_job_names_its_schedule_and_bulk_dispatches_count(
    store: Store,
) -> None:
    tick = 1_700_000_000.0
    await store.fire_tick(TickRequest(
        schedule="nightly", tick=tick, not_before=tick, fingerprint="fp", owner=OWNER,
        dispatch=DispatchRequest(key="tick-job", handler="thumbnail", payload=b"{}",
                                 max_attempts=1, schedule="nightly")))
    await store.dispatch_many([new_job("bulk")])

    assert await history(store, "tick-job") == [("dispatched", None, None, "nightly")]
    assert await history(store, "bulk") == [("dispatched", None, None, None)]
    assert (await claim(store, 0)).jobs == ()


async def test_a_lease_lost_for_good_or_under_a_stop_ends_the_history(store: Store) -> None:
    await store.dispatch(new_job("limit"))
    await store.dispatch(new_job("stopping"))
    lost = await claim_one(store, lease_ttl=SHORT_TTL, max_lease_losses=1)
    stopped = await claim_one(store, lease_ttl=SHORT_TTL, max_lease_losses=1)
    await store.stop(stopped.key)
    await wait_for_expiry()
    assert (await claim_as_supervisors_do(store, 0, owner=OTHER,
                                          max_lease_losses=1)).recovered == 2

    assert (await history(store, lost.key))[2:] == [
        ("lease_lost", OWNER, lost.token, "counted (1 in a row); failed"),
        ("failed", OWNER, lost.token, f"lease lost 1 times (limit 1), last held by {OWNER}"),
    ]
    assert (await history(store, stopped.key))[2:] == [
        ("stopping", OWNER, stopped.token, "stop"),
        ("lease_lost", OWNER, stopped.token, "counted (1 in a row); stopped"),
        ("stopped", OWNER, stopped.token, f"stop requested; lease of {OWNER} expired"),
    ]


async def test_a_stale_token_writes_no_event(store: Store) -> None:
    await store.dispatch(new_job("k"))
    old = await claim_one(store, lease_ttl=SHORT_TTL)
    await wait_for_expiry()
    await claim_one(store, owner=OTHER)
    before = await history(store, "k")
    for call in (store.complete(old.lease, b"{}"),
                 store.fail(old.lease, "late", final=True, retry_delay=0),
                 store.release(old.lease, reason="late"),
                 store.finish_stopped(old.lease, "late")):
        with pytest.raises(StaleToken):
            await call
    await store.claim(OWNER, ["thumbnail"], 0, 30.0, 3,
                      completing=[Completion(old.lease, b"{}")])

    assert await history(store, "k") == before
