"""Change hints from pub/sub channels, on a subscription that heals itself.

Scripts publish `w` (a job it may claim), `s:<key>` (stop requested for a job it holds)
and `n:<key>` (a notification was queued for one) on one supervisor's doorbell
(PoolKeys.doorbell), `w` for every supervisor on the pool's channel after a resume, and
a job's final state on its own `ended:<key>` channel when it ends (read by `job_ends`,
for `wait`).
Hints are lost while the connection is down; after every reconnect the feed yields a
`wake`, so the reader looks again.
A subscription Redis refuses (an ACL user without the channel) is no lost connection:
it is raised as a StoreError, as a script's refusal would be.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import anyio
from redis import exceptions as redis_errors
from redis.asyncio.client import PubSub

from supervisor.store.records import StoreEvent
from supervisor.store.redis.connection import RedisClient, open_pubsub, translated_errors

RECONNECT_FIRST_DELAY = 0.1
RECONNECT_MAX_DELAY = 5.0
# Silence this long makes the feed PING; no answer within as long again means the
# connection is dead even though the socket looks open (a frozen or partitioned server).
PROBE_AFTER = 5.0
SUBSCRIBE_TIMEOUT = 5.0

# A cluster client that reaches no node raises RedisClusterException, no RedisError.
DROPPED = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError,
           redis_errors.RedisClusterException)


def parse_event(data: bytes) -> StoreEvent | None:
    """The hint a channel message carries; None for anything unknown."""
    if data == b"w":
        return StoreEvent("wake")
    kind, colon, key = data.partition(b":")
    if colon and key and kind == b"s":
        return StoreEvent("stop", key.decode())
    if colon and key and kind == b"n":
        return StoreEvent("notify", key.decode())
    if colon and key and kind == b"d":
        request, colon, job_key = key.partition(b":")
        if colon and request and job_key:
            return StoreEvent("debug", job_key.decode(), request=request.decode())
    return None


def ended_hint(_data: bytes) -> StoreEvent:
    """Any message on a job's `ended` channel: look at the job again."""
    return StoreEvent("wake")


class EventFeed:
    """An endless async iterator of StoreEvent that never raises for a lost connection:
    it reconnects with backoff, forever, and yields a `wake` after each reconnect."""

    def __init__(
        self, client: RedisClient, channels: Sequence[str], *, where: str,
        probe_after: float = PROBE_AFTER, parse: Callable[[bytes], StoreEvent | None] = parse_event,
    ) -> None:
        self._client = client
        self._channels = list(channels)
        self._parse = parse
        self._where = where
        self._probe_after = probe_after
        self._pubsub: PubSub | None = None
        self._probing = False

    async def start(self) -> None:
        """Subscribe, so hints published after this returns are delivered.  A failure is
        not raised: the first iteration reconnects."""
        with translated_errors(self._where), contextlib.suppress(*DROPPED):
            await self._subscribe()

    def __aiter__(self) -> EventFeed:
        return self

    async def __anext__(self) -> StoreEvent:
        # Cancelling this is safe: redis-py's parsers resume a reply cut off mid-read.
        while True:
            if self._pubsub is None:
                await self._reconnect()
                return StoreEvent("wake")
            try:
                event = await self._receive(self._pubsub)
            except DROPPED:
                await self._drop()
                continue
            if event is not None:
                return event

    async def aclose(self) -> None:
        await self._drop()

    async def _receive(self, pubsub: PubSub) -> StoreEvent | None:
        message: dict[str, Any] | None = await pubsub.get_message(timeout=self._probe_after)
        if message is None:
            if self._probing:
                raise redis_errors.ConnectionError("no answer to PING on the event channel")
            await pubsub.ping()
            self._probing = True
            return None
        self._probing = False
        if message["type"] == "message":
            return self._parse(message["data"])
        return None

    async def _subscribe(self) -> None:
        pubsub = await open_pubsub(self._client)
        try:
            await pubsub.subscribe(*self._channels)
            confirmed = 0
            with anyio.fail_after(SUBSCRIBE_TIMEOUT):
                while confirmed < len(self._channels):
                    message = await pubsub.get_message(timeout=SUBSCRIBE_TIMEOUT)
                    if message is not None and message["type"] == "subscribe":
                        confirmed += 1
        except BaseException:
            await self._close(pubsub)
            raise
        self._pubsub = pubsub
        self._probing = False

    async def _reconnect(self) -> None:
        delay = RECONNECT_FIRST_DELAY
        while True:
            with translated_errors(self._where), contextlib.suppress(*DROPPED):
                await self._subscribe()
                return
            await anyio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_DELAY)

    async def _drop(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            await self._close(pubsub)

    @staticmethod
    async def _close(pubsub: PubSub) -> None:
        with anyio.CancelScope(shield=True), contextlib.suppress(*DROPPED):
            await pubsub.aclose()  # type: ignore[no-untyped-call]


@contextlib.asynccontextmanager
async def open_feed(
    client: RedisClient, *channels: str, where: str,
    parse: Callable[[bytes], StoreEvent | None] = parse_event,
) -> AsyncIterator[AsyncIterator[StoreEvent]]:
    """A feed of `channels`, subscribed on entering, closed on leaving."""
    feed = EventFeed(client, channels, where=where, parse=parse)
    await feed.start()
    try:
        yield feed
    finally:
        with anyio.CancelScope(shield=True):
            await feed.aclose()
