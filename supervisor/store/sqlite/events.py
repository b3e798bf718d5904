"""The SQLite store's change hints for `events()`: polled from the `events` table, with
two stat calls sparing the query while no process committed."""

from __future__ import annotations

import os
import time
from collections import deque

import anyio
import anyio.to_thread

from supervisor.errors import StoreUnavailable
from supervisor.store.records import StoreEvent
from supervisor.store.sqlite.db import SqliteDatabase

EVENT_POLL_INTERVAL = 0.01
EVENT_QUERY_INTERVAL = 1.0  # read the events table at least this often, changed or not
RECENT_WRITE_NS = 50_000_000
JOB_END_POLL = 0.2  # `job_ends`: a hint this often (a read of one row by the waiter)


class EventPoller:
    """Change hints, read from the `events` table every `EVENT_POLL_INTERVAL` seconds.
    A batch of identical hints comes out once; ends when the store is closed."""

    def __init__(self, db: SqliteDatabase, after: int) -> None:
        self._db = db
        self._after = after
        self._ready: deque[StoreEvent] = deque()
        self._files = (db.path, db.path.with_name(db.path.name + "-wal"))
        self._seen: tuple[tuple[int, int], ...] = ()
        self._queried_at = 0.0

    def __aiter__(self) -> EventPoller:
        return self

    def _changed(self) -> bool:
        """Whether any process may have committed since the last look.  Every commit
        writes the WAL (or, after a checkpoint, the database file), so two stat calls
        in the loop spare a thread hop and a query on every idle poll."""
        seen = []
        for path in self._files:
            try:
                info = os.stat(path)
                seen.append((info.st_mtime_ns, info.st_size))
            except OSError:
                seen.append((0, 0))
        changed, self._seen = tuple(seen) != self._seen, tuple(seen)
        # mtime has the kernel's coarse tick, so a second commit in the tick of the
        # last look changes nothing visible: look again while a write is that recent.
        recent = time.time_ns() - max(mtime for mtime, _ in seen) < RECENT_WRITE_NS
        now = time.monotonic()
        if changed or recent or now - self._queried_at >= EVENT_QUERY_INTERVAL:
            self._queried_at = now
            return True
        return False

    async def __anext__(self) -> StoreEvent:
        while not self._ready:
            await anyio.sleep(EVENT_POLL_INTERVAL)
            if self._db.closed:
                raise StopAsyncIteration
            if not self._changed():
                continue
            try:
                rows = await self._db.read(lambda tx: tx.rows("events_after", after=self._after))
            except StoreUnavailable:
                continue  # a hint may be lost; renewals and claims are the truth
            if rows:
                self._after = rows[-1]["id"]
                batch = (_event(row["kind"], row["key"]) for row in rows)
                self._ready.extend(dict.fromkeys(batch))
        return self._ready.popleft()


class JobEndPoll:
    """`job_ends` on SQLite: a `wake` every JOB_END_POLL seconds, endless."""

    def __aiter__(self) -> JobEndPoll:
        return self

    async def __anext__(self) -> StoreEvent:
        await anyio.sleep(JOB_END_POLL)
        return StoreEvent("wake")


def _event(kind: str, key: str | None) -> StoreEvent:
    """An events row as a StoreEvent: a "debug" row's key is "<request>:<job key>"."""
    if kind == "debug" and key is not None:
        request, _, job_key = key.partition(":")
        return StoreEvent("debug", job_key, request=request)
    return StoreEvent(kind, key)  # type: ignore[arg-type]
