"""Waiting for a job to end, without polling the store on Redis.

The order is what makes it safe: subscribe to the job's end hints first, then read its
record.  A job that ended before the subscription shows in that read; one that ends
after it sends a hint.  Hints can still be lost (a dropped connection; the feed yields a
hint after it reconnects, but a message published while it was down is gone), so the
record is also read every SAFETY_REREAD seconds without one.
"""

from __future__ import annotations

import anyio

from supervisor.errors import StoreUnavailable, WaitTimedOut
from supervisor.store.base import Store
from supervisor.store.records import FINISHED_STATES, JobRecord

SAFETY_REREAD = 5.0


async def wait_for_end(
    store: Store, key: str, timeout: float | None, *, reread_every: float = SAFETY_REREAD,
    where: str = "the store",
) -> JobRecord:
    """The job's record once it is succeeded, failed or stopped.  Raises `JobNotFound`
    for an unknown key, `WaitTimedOut` (a TimeoutError) when `timeout` seconds pass
    first; the job goes on.

    A timeout that runs out before the store answered the first read is the store's
    failure (`StoreUnavailable`, naming `where`): the wait knows nothing of the job then,
    not that it is "still live" (a store that is down, frozen, or slow to refuse:
    PostgreSQL's pool waits some 2 s for a connection)."""
    record: JobRecord | None = None
    with anyio.move_on_after(timeout):
        async with store.job_ends(key) as hints:
            record = await store.job(key)
            while record.state not in FINISHED_STATES:
                with anyio.move_on_after(reread_every):
                    await anext(hints)
                record = await store.job(key)
            return record
    if record is None:
        raise StoreUnavailable(f"{where} gave no answer within {timeout:g} s "
                               f"(the wait ran out before it could read job {key!r})")
    raise WaitTimedOut(f"job {key!r} is still {record.state} after {timeout:g} s "
                       f"(the wait ran out; the job goes on)")
