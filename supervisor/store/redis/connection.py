"""Connecting to Redis (one server, a Cluster, or a master behind Sentinel), and turning
driver errors into poolsup's."""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import ConnectionPool, SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel
from redis.backoff import NoBackoff

from supervisor.errors import StoreError, StoreUnavailable
from supervisor.redaction import redact_url
from supervisor.store.redis import url as redis_url

SOCKET_TIMEOUT = 5.0
HEALTH_CHECK_INTERVAL = 30
# Connections one client keeps to a server. redis-py's pool holds 100 and fails a command
# that finds none free ("Too many connections"): a host whose 1,000 running jobs write at
# the same moment (their output, their ends) lost renewals to it, and its jobs to their
# fences. One server's pool waits for a free connection instead (`WaitingConnectionPool`,
# up to SOCKET_TIMEOUT); a Cluster's and Sentinel's, which cannot wait, may open more.
MAX_CONNECTIONS = 64
MAX_CONNECTIONS_UNQUEUED = 4096


# Set by a lease renewal: when every connection is in use, it takes the next one released,
# ahead of the calls waiting (1,000 jobs' output at their ends kept one waiting 5 s).
RENEWAL_FIRST: contextvars.ContextVar[bool] = contextvars.ContextVar("renewal_first",
                                                                      default=False)


class WaitingConnectionPool(ConnectionPool):
    """redis-py's pool, but a command that finds every connection in use waits for one
    to be released (up to SOCKET_TIMEOUT) instead of failing. Not redis-py's
    BlockingConnectionPool: its queue costs every command some 5-10 us, a twentieth of
    the supervisor's CPU per job; here a command pays only when it has to wait."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._waiting: deque[asyncio.Future[None]] = deque()

    async def get_connection(self, *args: Any, **options: Any) -> Any:
        deadline = None
        while True:
            try:
                return await super().get_connection(*args, **options)  # type: ignore[no-untyped-call]
            except redis_errors.MaxConnectionsError:
                loop = asyncio.get_running_loop()
                deadline = deadline or loop.time() + SOCKET_TIMEOUT
                released: asyncio.Future[None] = loop.create_future()
                if RENEWAL_FIRST.get():
                    self._waiting.appendleft(released)
                else:
                    self._waiting.append(released)
                try:
                    await asyncio.wait_for(released, max(0.0, deadline - loop.time()))
                except TimeoutError:
                    raise redis_errors.ConnectionError(
                        f"no connection free within {SOCKET_TIMEOUT:g} s "
                        f"({self.max_connections} in use)") from None
                finally:
                    if released in self._waiting:
                        self._waiting.remove(released)

    async def release(self, connection: Any) -> None:
        await super().release(connection)
        while self._waiting:
            released = self._waiting.popleft()
            if not released.done():
                released.set_result(None)
                return

RedisClient = Redis | RedisCluster


@dataclass(frozen=True)
class Connection:
    """A client, and the sentinels that name its master (None: not behind Sentinel)."""

    client: RedisClient
    sentinel: tuple[str, Sentinel] | None = None

    async def master_address(self) -> str | None:
        """host:port of the master the sentinels name now (None: not behind Sentinel).
        Raises driver errors when no sentinel answers."""
        if self.sentinel is None:
            return None
        name, watchers = self.sentinel
        host, port = await watchers.discover_master(name)
        return f"{host}:{port}"

    async def aclose(self) -> None:
        await self.client.aclose()
        if self.sentinel is not None:
            for watcher in self.sentinel[1].sentinels:
                await watcher.aclose()


def connect(url: str) -> Connection:
    """A client for `url` (checked by redis_url.parse: ConfigError if it is wrong).  It
    connects on first use.

    The driver does not retry: our scripts are not idempotent, and a command retried
    after its reply was lost would run twice (a second claim, a spurious StaleToken).
    Callers see StoreUnavailable and decide; a stale pooled connection is still
    replaced silently, because the pool checks connections before handing them out.
    A cluster client still follows MOVED and ASK redirections (the command did not run
    where it was refused), and after a connection error it reads the cluster's layout
    again before its next command.
    """
    target = redis_url.parse(url, redact_url(url))
    if target.sentinel is not None:
        return _master_of(target.sentinel, target.url)
    options: dict[str, Any] = {
        "socket_timeout": SOCKET_TIMEOUT,
        "socket_connect_timeout": SOCKET_TIMEOUT,
        "health_check_interval": HEALTH_CHECK_INTERVAL,
        "retry": Retry(NoBackoff(), 0),
    }
    if target.cluster:
        return Connection(RedisCluster.from_url(target.url, max_connections=
                                                MAX_CONNECTIONS_UNQUEUED, **options))
    pool = WaitingConnectionPool.from_url(target.url, max_connections=MAX_CONNECTIONS,
                                          **options)
    return Connection(Redis.from_pool(pool))


def _master_of(sentinel: redis_url.SentinelTarget, master_url: str) -> Connection:
    """A client of the master the sentinels name.  Each new connection asks them where the
    master is; a connection to a master demoted under it fails (READONLY becomes a
    ConnectionError), so the next call, retried by its caller, finds the new one.  The
    URL's options win over our defaults, as `from_url` lets them for one server; the
    sentinels' own connections take the same timeouts, no-retry policy and TLS options."""
    options: dict[str, Any] = {"socket_timeout": SOCKET_TIMEOUT,
                               "socket_connect_timeout": SOCKET_TIMEOUT,
                               "health_check_interval": HEALTH_CHECK_INTERVAL,
                               "retry": Retry(NoBackoff(), 0),
                               "max_connections": MAX_CONNECTIONS_UNQUEUED,
                               **parse_url(master_url)}
    del options["host"]
    tls = options.pop("connection_class", None) is SSLConnection
    own: dict[str, Any] = {"ssl": tls, "retry": options["retry"],
                           **{name: value for name, value in options.items()
                              if name.startswith(("ssl_", "socket_"))}}
    if sentinel.password is not None:
        own |= {"username": sentinel.username, "password": sentinel.password}
    watchers = _Sentinels(  # type: ignore[no-untyped-call]
        list(sentinel.sentinels), sentinel_kwargs=own)
    client = watchers.master_for(sentinel.master, ssl=tls, **options)
    return Connection(client, (sentinel.master, watchers))


class SentinelsRefused(MasterNotFoundError, redis_errors.AuthenticationError):
    """No master found, and a sentinel refused our credentials: fixing them comes first."""


class _Sentinels(Sentinel):
    """redis-py's Sentinel, whose MasterNotFoundError says what each sentinel answered.

    The driver's lists each sentinel as the repr of its client (some 1,500 characters of
    connection options) and each error as its kind alone ("network:ConnectionError"):
    a wrong CA, a missing client certificate or a refused password read the same, in a
    one-line error of several KB.  This one names each sentinel by address with its
    error's text, and is an AuthenticationError when one refused the credentials
    (translated_errors then says "authentication failed")."""

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        answers: list[str] = []
        refused = False
        for n, watcher in enumerate(self.sentinels):
            kwargs = watcher.connection_pool.connection_kwargs
            address = f"sentinel {kwargs.get('host')}:{kwargs.get('port')}"
            try:
                masters = await watcher.sentinel_masters()
            except (redis_errors.ConnectionError, redis_errors.TimeoutError) as exc:
                refused = refused or isinstance(exc, redis_errors.AuthenticationError)
                answers.append(f"{address}: {exc or type(exc).__name__}")
                continue
            state = masters.get(service_name) if isinstance(masters, dict) else None
            if state and self.check_master_state(state, service_name):
                # As the driver does: the sentinel that answered is asked first next time.
                self.sentinels[0], self.sentinels[n] = watcher, self.sentinels[0]
                return state["ip"], state["port"]
            answers.append(f"{address}: " + ("watches no master of that name" if not state
                                             else "sees it down or not a master"))
        error = SentinelsRefused if refused else MasterNotFoundError
        raise error(f"no master found for {service_name!r}: " + "; ".join(answers))


async def open_pubsub(client: RedisClient) -> PubSub:
    """A pub/sub connection on `client`.  A cluster client must know the cluster's
    layout before it can pick the node of a channel, which only its commands teach it:
    it learns it here if it has not yet."""
    if isinstance(client, RedisCluster):
        await client.initialize()
    return client.pubsub()


def _refused_credentials(exc: BaseException) -> redis_errors.AuthenticationError | None:
    """The AuthenticationError behind `exc`: itself, or what made a cluster client give up
    on every node."""
    for error in (exc, exc.__cause__):
        if isinstance(error, redis_errors.AuthenticationError):
            return error
    return None


@contextmanager
def translated_errors(where: str) -> Iterator[None]:
    """Raise StoreUnavailable or StoreError for driver errors inside the block."""
    try:
        yield
    except (redis_errors.ConnectionError, redis_errors.RedisClusterException) as exc:
        # An AuthenticationError is a ConnectionError to redis-py; it is named apart, since
        # no wait mends it alone.  A cluster client that reaches no node, or no node for
        # a slot, raises a RedisClusterException, which is no RedisError.
        refused = _refused_credentials(exc)
        if refused is not None:
            raise StoreUnavailable(
                f"redis at {where}: authentication failed: {refused}") from exc
        raise StoreUnavailable(f"redis at {where} unreachable: {exc}") from exc
    except (redis_errors.TimeoutError, OSError) as exc:
        raise StoreUnavailable(f"redis at {where} unreachable: {exc}") from exc
    except redis_errors.NoPermissionError as exc:
        raise StoreError(f"redis at {where}: not permitted for this user (ACL): {exc}") from exc
    except redis_errors.RedisError as exc:
        raise StoreError(f"redis at {where} refused the request: {exc}") from exc
