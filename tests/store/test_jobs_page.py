"""`Store.jobs_page`: one page of the jobs listing, ordered by key, with a key prefix,
so that a dashboard never reads every record of a large pool."""

from __future__ import annotations

import anyio
import pytest

from supervisor.store.base import Store
from supervisor.store.records import DispatchRequest
from tests.store.support import claim, dispatch_all, new_job

pytestmark = pytest.mark.anyio


async def _keys(store: Store, state: str | None = None, **options: object) -> list[str]:
    return [record.key for record in await store.jobs_page(state, **options)]  # type: ignore[arg-type]


async def test_pages_follow_each_other_by_key(store: Store) -> None:
    keys = [f"job-{n:04d}" for n in range(120)]
    await store.dispatch_many([new_job(key) for key in reversed(keys)])

    first = await _keys(store, limit=50)
    second = await _keys(store, after=first[-1], limit=50)
    third = await _keys(store, after=second[-1], limit=50)

    assert first + second + third == keys
    assert len(third) == 20
    assert await _keys(store, after=third[-1], limit=50) == []


async def test_a_prefix_keeps_only_the_keys_that_start_with_it(store: Store) -> None:
    await dispatch_all(store, ["img-2", "img-1", "imgx", "video-1", "im", "a[*]?-1", "a-2"])

    assert await _keys(store, prefix="img-") == ["img-1", "img-2"]
    assert await _keys(store, prefix="img") == ["img-1", "img-2", "imgx"]
    assert await _keys(store, prefix="img-", after="img-1") == ["img-2"]
    # Glob and LIKE characters in a prefix are plain characters.
    assert await _keys(store, prefix="a[*]?") == ["a[*]?-1"]
    assert await _keys(store, prefix="nothing") == []


async def test_a_state_keeps_only_its_jobs(store: Store) -> None:
    await dispatch_all(store, ["a-ok", "b-bad", "c-run", "d-wait"])
    ok, bad, _run = (await claim(store, 3)).jobs
    await store.complete(ok.lease, b"1")
    await store.fail(bad.lease, "<script>boom</script>", final=True, retry_delay=0.0)

    assert await _keys(store, "failed") == ["b-bad"]
    assert await _keys(store, "running") == ["c-run"]
    assert await _keys(store, "pending") == ["d-wait"]
    assert await _keys(store, "succeeded") == ["a-ok"]
    assert await _keys(store, "stopped") == []
    assert await _keys(store) == ["a-ok", "b-bad", "c-run", "d-wait"]
    (failed,) = await store.jobs_page("failed")
    assert failed.error == "<script>boom</script>"
    assert failed.handler == "thumbnail"


async def test_the_records_of_a_page_are_those_of_job(store: Store) -> None:
    await store.dispatch(DispatchRequest(key="k1", handler="thumbnail", payload=b'{"x": 1}',
                                         max_attempts=2, priority=3, group="g"))
    (listed,) = await store.jobs_page()
    whole = await store.job("k1")
    assert listed.to_json() | {"events": []} == whole.to_json() | {"events": []}


async def test_the_limit_must_be_positive(store: Store) -> None:
    with pytest.raises(ValueError, match="limit"):
        await store.jobs_page(limit=0)


async def test_the_latest_finished_come_newest_first(store: Store) -> None:
    await dispatch_all(store, ["f-1", "f-2", "f-3", "ok-1"])
    claimed = {job.key: job for job in (await claim(store, 4)).jobs}
    for key in ("f-2", "f-3", "f-1"):  # finished in this order
        await store.fail(claimed[key].lease, f"boom {key}", final=True, retry_delay=0.0)
        await anyio.sleep(0.01)
    await store.complete(claimed["ok-1"].lease, b"1")

    latest = await store.latest_finished("failed", limit=2)

    assert [record.key for record in latest] == ["f-1", "f-3"]
    assert latest[0].error == "boom f-1"
    assert [r.key for r in await store.latest_finished("succeeded")] == ["ok-1"]
    assert await store.latest_finished("stopped") == []
    with pytest.raises(ValueError, match="finished state"):
        await store.latest_finished("running")  # type: ignore[arg-type]
