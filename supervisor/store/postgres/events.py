"""The PostgreSQL store's change hints: NOTIFY, sent inside the transaction of the change
(so a hint goes out only when that change commits, and never for a rollback), heard by
LISTEN on a dedicated connection of the listener's own.

Channels (poolsup.channel() in SQL, `channel` here; md5, so any pool name or key fits
in the 63 bytes of a channel name): each supervisor's own, which carries its wake-ups
(`w`: one waiting supervisor per job made due, sql/schema.sql wake_one) and the stop
(`s KEY`), notify (`n KEY`) and debug (`d REQUEST KEY`) requests for the jobs it holds;
the pool's, which carries the wake of a resume to everyone; and one per job key, which
carries `e` when the job ends, for `job_ends`, only while a caller waits (a row of
poolsup.end_waiters: PostgreSQL signals every backend that listens in the database for
each NOTIFY, whatever its channel, so an end that nobody waits for is not sent).  A lost
connection is reconnected with backoff, and a `wake` follows, since hints may have been
missed meanwhile.
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

import anyio
import psycopg
from psycopg import sql

from supervisor.errors import StoreUnavailable
from supervisor.store.records import StoreEvent
from supervisor.store.sql.tx import Tx

if TYPE_CHECKING:
    from supervisor.store.postgres.db import PgDatabase

POOL_CHANNEL = ""
LISTEN_POLL = 1.0  # a listener looks whether it was closed at least this often
RECONNECT_PAUSES = (0.1, 0.5, 1.0, 2.0)
WAITER_DROP_WAIT = 1.0  # seconds a wait's end waits for its row to be deleted


def channel(pool: str, name: str) -> str:
    """The NOTIFY channel `name` of `pool`, as poolsup.channel() makes it in SQL."""
    return "poolsup_" + hashlib.md5(f"{pool}\n{name}".encode()).hexdigest()


def end_channel(key: str) -> str:
    return f"end\n{key}"


async def wake_one(tx: Tx, handler: str) -> None:
    """Wake one supervisor waiting for jobs of `handler`, if any is."""
    await tx.run("wake_one", handler=handler)


async def wake_pool(tx: Tx) -> None:
    await tx.run("notify", channel=POOL_CHANNEL, message="w")


async def to_holder(tx: Tx, supervisor: str | None, kind: str, *words: str) -> None:
    """A request for the supervisor that holds a job."""
    if supervisor:
        await tx.run("notify", channel=supervisor, message="\t".join((kind, *words)))


async def ended(tx: Tx, key: str) -> None:
    await tx.run("notify_end", channel=end_channel(key), key=key)


def decode(message: str) -> StoreEvent:
    kind, _, rest = message.partition("\t")
    if kind == "s":
        return StoreEvent("stop", rest)
    if kind == "n":
        return StoreEvent("notify", rest)
    if kind == "d":
        request, _, key = rest.partition("\t")
        return StoreEvent("debug", key, request=request)
    return StoreEvent("wake")


class Listener:
    """Hints on `channels`, from one connection of its own (autocommit, LISTEN); ends
    when closed."""

    def __init__(self, conninfo: str, pool: str, names: Sequence[str]) -> None:
        self._conninfo = conninfo
        self._channels = [channel(pool, name) for name in names]
        self._conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self._closed = False
        self._failures = 0
        self._ready: deque[StoreEvent] = deque()

    def __aiter__(self) -> Listener:
        return self

    async def connect(self) -> bool:
        """Listen on a new connection; False if the server cannot be reached now."""
        try:
            conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        except psycopg.Error:
            return False
        try:
            for name in self._channels:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
        except psycopg.Error:
            await conn.close()
            return False
        self._conn = conn
        return True

    async def __anext__(self) -> StoreEvent:
        while not self._closed:
            if self._conn is None:
                if await self.connect():
                    self._failures = 0
                    return StoreEvent("wake")  # hints may have been missed meanwhile
                pause = RECONNECT_PAUSES[min(self._failures, len(RECONNECT_PAUSES) - 1)]
                self._failures += 1
                await anyio.sleep(pause)
                continue
            if self._ready:
                return self._ready.popleft()
            try:
                # The whole batch of a packet is taken: leaving the generator early
                # would drop the rest of it.
                async for notify in self._conn.notifies(timeout=LISTEN_POLL, stop_after=1):
                    self._ready.append(decode(notify.payload))
            except psycopg.Error:
                await self._drop()
        raise StopAsyncIteration

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                await conn.close()

    async def aclose(self) -> None:
        self._closed = True
        await self._drop()


@contextlib.asynccontextmanager
async def listening(conninfo: str, pool: str, names: Sequence[str],
                    ) -> AsyncIterator[AsyncIterator[StoreEvent]]:
    """A `Listener` listening before the block starts (if the server answers)."""
    listener = Listener(conninfo, pool, names)
    await listener.connect()
    try:
        yield listener
    finally:
        with anyio.CancelScope(shield=True):
            await listener.aclose()


@contextlib.asynccontextmanager
async def waiting_for_end(db: PgDatabase, conninfo: str, pool: str, key: str,
                          ) -> AsyncIterator[AsyncIterator[StoreEvent]]:
    """`listening` to the job's end, with this caller written down as waiting for it
    first (so that an end committed after the caller reads the job is sent).  A store
    that cannot take the row leaves the caller to its rereads, as a lost hint would."""
    waiter = uuid.uuid4().hex
    with contextlib.suppress(StoreUnavailable):
        await db.write_one("add_end_waiter", key=key, waiter=waiter)
    try:
        async with listening(conninfo, pool, [end_channel(key)]) as hints:
            yield hints
    finally:
        # A row left behind costs a spare hint, and goes with the job's record.
        with anyio.CancelScope(shield=True), anyio.move_on_after(WAITER_DROP_WAIT), \
                contextlib.suppress(StoreUnavailable):
            await db.write_one("drop_end_waiter", key=key, waiter=waiter)
