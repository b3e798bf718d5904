"""Each run's output (`poolsup logs`): kept per run of the current dispatch, the newest
max_bytes bytes, readable from an offset, gone with the record and with a new dispatch."""

from __future__ import annotations

import anyio
import pytest

from supervisor.errors import JobNotFound, StaleToken
from supervisor.store.base import Store
from supervisor.store.policy import output_slack
from supervisor.store.records import ClaimedJob, RunOutput
from tests.store.conftest import Connect
from tests.store.support import (
    OWNER,
    SHORT_TTL,
    claim,
    claim_one,
    new_job,
    wait_for_expiry,
)

pytestmark = pytest.mark.anyio

OTHER = "sup-b"
MAX = 1000


async def append(store: Store, job: ClaimedJob, data: bytes, *, at: int,
                 ended: bool = False, max_bytes: int = MAX) -> None:
    await store.append_output(job.lease, job.attempt, data, at=at, max_bytes=max_bytes,
                              ended=ended)


async def only_run(store: Store, key: str, offset: int = 0) -> RunOutput:
    runs = await store.output(key)
    assert len(runs) == 1, runs
    if offset:
        (run,) = await store.output(key, {runs[0].token: offset})
        return run
    return runs[0]


async def test_a_runs_output_is_read_back_with_its_attempt_and_supervisor(store: Store) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    assert await store.output("k") == []

    await append(store, job, b"hello\n", at=0)
    await append(store, job, b"world\n", at=6)

    assert await store.output("k") == [RunOutput(
        token=job.token, attempt=1, supervisor=OWNER, data=b"hello\nworld\n", start=0,
        kept_from=0, total=12, ended=False)]


async def test_a_read_from_an_offset_returns_only_the_newer_bytes(store: Store) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    await append(store, job, b"hello\nworld\n", at=0)

    run = await only_run(store, "k", offset=6)

    assert (run.data, run.start, run.total) == (b"world\n", 6, 12)
    assert (await store.output("k", {job.token: 12}))[0].data == b""


async def test_the_last_write_of_a_run_marks_it_ended(store: Store) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    await append(store, job, b"a", at=0)
    await append(store, job, b"", at=1, ended=True)

    assert (await only_run(store, "k")).ended


async def test_only_the_newest_max_bytes_are_kept(store: Store) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    printed = b"".join(b"%05d\n" % n for n in range(2000))  # 12,000 bytes
    for at in range(0, len(printed), 700):
        await append(store, job, printed[at:at + 700], at=at)

    run = await only_run(store, "k")

    assert run.data == printed[-MAX:]
    assert (run.kept_from, run.start, run.total) == (len(printed) - MAX, len(printed) - MAX,
                                                     len(printed))


async def test_a_write_sent_again_is_not_kept_twice(store: Store) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    await append(store, job, b"one\n", at=0)
    await append(store, job, b"one\ntwo\n", at=0)  # the first reply was lost
    await append(store, job, b"one\n", at=0)

    run = await only_run(store, "k")

    assert (run.data, run.total) == (b"one\ntwo\n", 8)


async def test_bytes_the_supervisor_dropped_count_as_printed_not_kept(store: Store) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    await append(store, job, b"first\n", at=0)
    await append(store, job, b"later\n", at=506)  # 500 bytes dropped in between

    run = await only_run(store, "k")

    assert (run.data, run.kept_from, run.total) == (b"later\n", 506, 512)


async def test_each_run_is_shown_apart_oldest_first(store: Store) -> None:
    await store.dispatch(new_job("k"))
    first = await claim_one(store)
    await append(store, first, b"attempt one\n", at=0)
    await store.fail(first.lease, "boom", final=False, retry_delay=0)
    second = await claim_one(store, owner=OTHER)
    await append(store, second, b"attempt two\n", at=0)

    runs = await store.output("k")

    assert [(r.attempt, r.supervisor, r.data, r.ended) for r in runs] == [
        (1, OWNER, b"attempt one\n", True),  # the job no longer runs under its token
        (2, OTHER, b"attempt two\n", False),
    ]
    assert runs[0].token < runs[1].token


async def test_a_fenced_run_still_writes_its_tail(store: Store) -> None:
    await store.dispatch(new_job("k"))
    fenced = await claim_one(store, lease_ttl=SHORT_TTL)
    await append(store, fenced, b"before\n", at=0)
    await wait_for_expiry()
    now = await claim_one(store, owner=OTHER)
    assert now.token > fenced.token

    await append(store, fenced, b"tail\n", at=7, ended=True)

    runs = await store.output("k")
    assert [(r.token, r.data, r.ended) for r in runs] == [(fenced.token, b"before\ntail\n", True)]


async def test_a_key_dispatched_again_starts_without_output_and_refuses_the_old_runs(
    store: Store,
) -> None:
    await store.dispatch(new_job("k"))
    old = await claim_one(store)
    await append(store, old, b"old\n", at=0)
    await store.complete(old.lease, b"1")
    await store.dispatch(new_job("k"))
    assert await store.output("k") == []
    new = await claim_one(store)

    with pytest.raises(StaleToken):
        await append(store, old, b"late\n", at=4)
    await append(store, new, b"new\n", at=0)

    assert [r.data for r in await store.output("k")] == [b"new\n"]


async def test_a_retried_job_starts_without_output(store: Store) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    await append(store, job, b"failed run\n", at=0)
    await store.fail(job.lease, "boom", final=True, retry_delay=0)

    await store.retry("k")

    assert await store.output("k") == []
    with pytest.raises(StaleToken):
        await append(store, job, b"late\n", at=11)


async def test_output_goes_with_the_record_after_the_retention_period(connect: Connect) -> None:
    store = await connect(retention=1.0)
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    await append(store, job, b"kept a while\n", at=0)
    await store.complete(job.lease, b"1")
    assert (await only_run(store, "k")).ended

    await anyio.sleep(1.5)

    with pytest.raises(JobNotFound):
        await store.output("k")
    with pytest.raises(JobNotFound):
        await append(store, job, b"late\n", at=13)
    await store.dispatch(new_job("k"))
    assert await store.output("k") == []


async def test_a_tail_written_after_the_end_goes_with_the_record_too(connect: Connect) -> None:
    store = await connect(retention=1.0)
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    await append(store, job, b"before\n", at=0)
    await store.complete(job.lease, b"1")
    await append(store, job, b"after the end\n", at=7, ended=True)
    assert (await only_run(store, "k")).data == b"before\nafter the end\n"

    await anyio.sleep(1.5)

    await store.dispatch(new_job("k"))
    assert await store.output("k") == []


async def test_output_of_an_unknown_key_is_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        await store.output("nope")


async def test_a_pending_job_that_never_ran_has_no_output(store: Store) -> None:
    await store.dispatch(new_job("k"))
    assert await store.output("k") == []


async def test_the_store_holds_at_most_max_bytes_and_its_slack_per_run(store: Store) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    chunk = b"y" * 300
    for n in range(100):
        await append(store, job, chunk, at=n * 300)
        run = await only_run(store, "k")
        assert run.total - run.kept_from <= MAX
    assert len(run.data) == MAX
    assert output_slack(MAX) < 64 * 1024


async def test_output_of_several_jobs_stays_apart(store: Store) -> None:
    await store.dispatch(new_job("a"))
    await store.dispatch(new_job("a:1"))
    a, a1 = (await claim(store, 2)).jobs
    await append(store, a, b"of a\n", at=0)
    await append(store, a1, b"of a:1\n", at=0)

    assert [r.data for r in await store.output(a.key)] == [b"of %s\n" % a.key.encode()]
    assert [r.data for r in await store.output(a1.key)] == [b"of %s\n" % a1.key.encode()]
