"""The keys of a page of `Store.jobs_page` on Redis (reads.py).

Redis keeps no index of job keys in key order (the state sets are scored by time), so a
page scans the state's set with ZSCAN, in steps that keep every call short, with the
prefix matched inside Redis so that only matching keys travel; it keeps the `limit`
smallest keys after `after`; reads.py then reads only those records."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import cast

from supervisor.store.paging import glob_pattern, on_page
from supervisor.store.redis.connection import RedisClient, translated_errors

SCAN_STEP = 1000  # members Redis looks at per ZSCAN call: about 1 ms of its time each


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

