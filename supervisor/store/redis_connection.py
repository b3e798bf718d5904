"""Connecting to Redis, and turning driver errors into poolsup's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qsl, urlencode, urlsplit

from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from supervisor.errors import StoreError, StoreUnavailable

SOCKET_TIMEOUT = 5.0
HEALTH_CHECK_INTERVAL = 30


def connect(url: str) -> Redis:
    """A client for `url`.  It connects on first use.

    The driver does not retry: our scripts are not idempotent, and a command retried
    after its reply was lost would run twice (a second claim, a spurious StaleToken).
    Callers see StoreUnavailable and decide; a stale pooled connection is still
    replaced silently, because the pool checks connections before handing them out.
    """
    return Redis.from_url(
        url,
        socket_timeout=SOCKET_TIMEOUT,
        socket_connect_timeout=SOCKET_TIMEOUT,
        health_check_interval=HEALTH_CHECK_INTERVAL,
        retry=Retry(NoBackoff(), 0),
    )


def redact(url: str) -> str:
    """The URL without its password (in the user info or a `password=` parameter)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        host = netloc.rpartition("@")[2]
        netloc = f"{parts.username}@{host}" if parts.username else host
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "password"])
    # Built by hand: urlunsplit drops the `//` of an empty host (unix:///path).
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")


@contextmanager
def translated_errors(where: str) -> Iterator[None]:
    """Raise StoreUnavailable or StoreError for driver errors inside the block."""
    try:
        yield
    except (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError) as exc:
        raise StoreUnavailable(f"redis at {where} unreachable: {exc}") from exc
    except redis_errors.RedisError as exc:
        raise StoreError(f"redis at {where} refused the request: {exc}") from exc
