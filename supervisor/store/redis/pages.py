"""`Store.jobs_page` and `Store.latest_finished` on Redis.

Redis keeps no index of job keys in key order (the state sets are scored by time), so a
page scans the state's set with ZSCAN, in steps that keep every call short, with the
prefix matched inside Redis so that only matching keys travel; it keeps the `limit`
smallest keys after `after`, then reads only those records.  The latest finished are the
top of their done set, which is scored by finish time."""

from __future__ import annotations

import heapq
from collections.abc import Awaitable, Callable, Sequence
from typing import cast

from supervisor.store.paging import checked_finished, checked_limit, glob_pattern, on_page
from supervisor.store.records import JobRecord, JobState
from supervisor.store.redis.connection import RedisClient, translated_errors
from supervisor.store.redis.keys import PoolKeys

SCAN_STEP = 1000  # members Redis looks at per ZSCAN call: about 1 ms of its time each

ReadRecords = Callable[[Sequence[str]], Awaitable[list[JobRecord | None]]]


async def page_keys(client: RedisClient, sets: Sequence[str], *, prefix: str, after: str,
                    limit: int, where: str) -> list[str]:
    """The `limit` smallest keys among `sets` that start with `prefix` and sort after
    `after`."""
    best: list[str] = []
    pattern = glob_pattern(prefix)
    with translated_errors(where):
        for name in sets:
            cursor = 0
            while True:
                cursor, entries = await client.zscan(name, cursor, match=pattern,
                                                     count=SCAN_STEP)
                found = {cast(bytes, member).decode() for member, _score in entries}
                best = heapq.nsmallest(limit, set(best) | {
                    key for key in found if on_page(key, prefix, after)})
                if cursor == 0:
                    break
    return best


async def jobs_page(client: RedisClient, keys: PoolKeys, read: ReadRecords,
                    state: JobState | None, *, prefix: str, after: str, limit: int,
                    where: str) -> list[JobRecord]:
    limit = checked_limit(limit)
    sets = [keys.by_state[state]] if state else list(keys.by_state.values())
    page = await page_keys(client, sets, prefix=prefix, after=after, limit=limit, where=where)
    records = await read(page)
    return [record for record in records
            if record is not None and (state is None or record.state == state)]


async def latest_finished(client: RedisClient, keys: PoolKeys, read: ReadRecords,
                          state: JobState, *, limit: int, where: str) -> list[JobRecord]:
    checked_finished(state)
    limit = checked_limit(limit)
    with translated_errors(where):
        newest = await client.zrevrange(keys.done(state), 0, limit - 1)
    records = await read([cast(bytes, key).decode() for key in newest])
    return [record for record in records if record is not None and record.state == state]
