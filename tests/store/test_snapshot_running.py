"""`snapshot` lists every running job with what `status` shows of it, however many run
(the Redis store reads them in batches of FIELDS_BATCH)."""

from __future__ import annotations

import dataclasses

import pytest

from supervisor.store import Store
from supervisor.store.records import JobStats
from supervisor.store.redis.reads import FIELDS_BATCH
from tests.store.support import LONG_TTL, OWNER, claim, new_job, supervisor

pytestmark = pytest.mark.anyio

LEFT_OUT = ("payload", "result", "error", "events")  # what a store may leave out


async def test_snapshot_shows_every_running_job_as_its_record_says(store: Store) -> None:
    count = FIELDS_BATCH + 44
    keys = [f"k{n:04d}" for n in range(count)]
    await store.register(supervisor(OWNER, capacity=count))
    await store.dispatch_many([new_job(key) for key in keys])
    leases = []
    while len(leases) < count:
        leases += [job.lease for job in (await claim(store, 100)).jobs]
    stats = {lease.key: JobStats(pid=1000 + n, rss_bytes=4096 * n, cpu_percent=n / 2)
             for n, lease in enumerate(leases)}
    await store.renew(OWNER, "i-1", leases, LONG_TTL, stats)
    await store.save_checkpoint(leases[0], b'{"offset": 7}')

    snapshot = await store.snapshot()

    assert sorted(record.key for record in snapshot.running) == keys
    for shown in snapshot.running:
        record = await store.job(shown.key)
        assert shown.stats == stats[shown.key]
        assert dataclasses.replace(shown, **{name: getattr(record, name) for name in LEFT_OUT}
                                   ) == record
