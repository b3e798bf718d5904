"""The Redis store: every state change is one Lua script, so one round trip, atomic.

Key layout (see redis/keys.py): a hash per job (a delayed one is due at its
`run_at`, in `pending` and its queue like a retry held back), `pending` and `running` zsets that
order work by due time and lease deadline, one `queue:<handler>` zset per handler
(its pending jobs, for claiming), one `reserved:<supervisor>` zset per move target,
one `done:<state>` zset per final state for listing and retention, a token counter,
the membership (`sup`, `seen`), the store's health, and the schedules: a record
hash per schedule, the set of their names and an index of each one's jobs
(redis/dispatch.py).  All of a pool's keys share one
hash tag.  Times come from Redis TIME.

`members` and `snapshot` read with plain commands and one script that calls no write
command (lua/members-3.lua), so that they work while Redis refuses writes.

The store is composed of its parts, one per group of operations, each in its own file
over one shared context (redis/context.py): what is left here is opening and closing
the connection and the event feeds.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager

import anyio
import anyio.to_thread

from supervisor.errors import ConfigError
from supervisor.redaction import redact_url
from supervisor.store.policy import NO_LOCK_DELAY_ENV as NO_LOCK_DELAY_ENV
from supervisor.store.records import StoreEvent
from supervisor.store.redis.claim import LAYOUT as LAYOUT
from supervisor.store.redis.claim import RedisClaim
from supervisor.store.redis.connection import SOCKET_TIMEOUT, connect, translated_errors
from supervisor.store.redis.context import RedisContext
from supervisor.store.redis.debug import RedisDebug
from supervisor.store.redis.dispatch import RedisDispatch
from supervisor.store.redis.events import ended_hint, open_feed
from supervisor.store.redis.keys import PoolKeys
from supervisor.store.redis.membership import RedisMembership
from supervisor.store.redis.notes import RedisNotes
from supervisor.store.redis.output import RedisOutput
from supervisor.store.redis.reads import RedisReads
from supervisor.store.redis.records import milliseconds
from supervisor.store.redis.replicated import ReplicatedWrites
from supervisor.store.redis.retry import RedisRetry
from supervisor.store.redis.scripts import Scripts, commands
from supervisor.store.redis.steering import RedisSteering
from supervisor.store.witness import FailureWitness

DEFAULT_RETENTION = 86400.0


class RedisStore(RedisDispatch, RedisClaim, RedisSteering, RedisNotes, RedisOutput,
                 RedisRetry, RedisMembership, RedisReads, RedisDebug):
    """`Store` on Redis 6.2+ or Valkey (redis://, rediss://, unix://)."""

    def __init__(self, url: str, pool: str, *, retention: float, wait_replicas: int = 0) -> None:
        self.pool = pool
        where = redact_url(url)
        try:
            connection = connect(url)
        except ValueError as exc:
            raise ConfigError(f"store URL {where!r}: {exc}") from exc
        scripts = Scripts(connection.client)
        super().__init__(RedisContext(
            pool=pool,
            keys=PoolKeys(pool),
            connection=connection,
            where=where,
            retention_ms=max(1, round(milliseconds(retention))),
            scripts=scripts,
            replicated=ReplicatedWrites(scripts, where, wait_replicas),
            witness=FailureWitness(time.monotonic, max_wait=SOCKET_TIMEOUT + 1.0),
            no_lock_delay=os.environ.get(NO_LOCK_DELAY_ENV) == "1",
        ))

    @classmethod
    async def open(
        cls, url: str, pool: str, *, retention: float = DEFAULT_RETENTION,
        wait_replicas: int = 0,
    ) -> RedisStore:
        """A store for `url`; it connects on first use (see `ping`).  With `wait_replicas`,
        a dispatch returns and a claim hands out jobs only once that many replicas hold
        them (redis/wait.py)."""
        await anyio.to_thread.run_sync(commands)  # read the Lua files off the event loop
        return cls(url, pool, retention=retention, wait_replicas=wait_replicas)

    def events(self, supervisor_id: str) -> AbstractAsyncContextManager[AsyncIterator[StoreEvent]]:
        k = self._ctx.keys
        return open_feed(self._ctx.client, k.channel, k.doorbell(supervisor_id),
                         where=self._ctx.where)

    def job_ends(self, key: str) -> AbstractAsyncContextManager[AsyncIterator[StoreEvent]]:
        return open_feed(self._ctx.client, self._ctx.keys.ended(key), where=self._ctx.where,
                         parse=ended_hint)

    async def ping(self) -> None:
        with translated_errors(self._ctx.where):
            await self._ctx.client.ping()

    async def close(self) -> None:
        await self._ctx.connection.aclose()
