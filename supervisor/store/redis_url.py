"""Redis store URLs, checked before the driver sees them.

redis-py's `from_url` takes the URL's query parameters as connection options
(`ssl_ca_certs`, `ssl_certfile`, `ssl_keyfile`, `ssl_cert_reqs`, `socket_timeout`, ...),
but it checks them only when it opens the first connection, and then a typo is a
TypeError and a missing certificate file reads like an unreachable server.  `parse`
checks them here, once, so that each mistake is one configuration error that names it.

`redis+cluster://` and `rediss+cluster://` name a Redis Cluster by one (or any) of its
nodes; the rest of such a URL is read as for `redis://` and `rediss://`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS

from supervisor.errors import ConfigError

CLUSTER_SUFFIX = "+cluster"
BASE_SCHEMES = ("redis", "rediss", "unix")
SCHEMES = frozenset({*BASE_SCHEMES, "redis" + CLUSTER_SUFFIX, "rediss" + CLUSTER_SUFFIX})
_FILE_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
_DIRECTORY_OPTIONS = ("ssl_ca_path",)
_CERT_REQS = ("none", "optional", "required")
# What a query may set: the options redis-py converts from text itself, and those it
# takes as text.  Not the rest of its keyword arguments: objects, or switches such as
# decode_responses that would change what the store reads back; nor retry_on_timeout,
# since a script retried after its reply was lost would run twice.
_TEXT_OPTIONS = frozenset({*_FILE_OPTIONS, *_DIRECTORY_OPTIONS, "ssl_cert_reqs",
                           "ssl_password", "ssl_ciphers", "client_name", "username",
                           "password"})
_OPTIONS = (frozenset(URL_QUERY_ARGUMENT_PARSERS) | _TEXT_OPTIONS) - {"retry_on_timeout"}
# RedisCluster takes fewer: it names each option it passes on to its nodes.
_CLUSTER_OPTIONS = _OPTIONS & frozenset(inspect.signature(RedisCluster.__init__).parameters)


@dataclass(frozen=True)
class RedisTarget:
    """What a store URL names: the URL for redis-py's `from_url`, and whether it is a
    cluster (to be opened with `RedisCluster`)."""

    url: str
    cluster: bool


def parse(url: str, shown: str) -> RedisTarget:
    """Check `url` (shown in errors as `shown`, its password redacted)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ConfigError(f"store URL {shown!r}: not a Redis URL")
    cluster = scheme.endswith(CLUSTER_SUFFIX)
    base = scheme.removesuffix(CLUSTER_SUFFIX)
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name not in (_CLUSTER_OPTIONS if cluster else _OPTIONS):
            kind = " for a Redis Cluster" if cluster and name in _OPTIONS else ""
            raise ConfigError(f"store URL {shown!r}: unknown parameter {name!r}{kind}")
        if name.startswith("ssl_") and base != "rediss":
            raise ConfigError(f"store URL {shown!r}: {name} is only for rediss:// "
                              f"(TLS), not {scheme}://")
        _check_option(name, value, shown)
    if cluster and parts.path.strip("/") not in ("", "0"):
        raise ConfigError(f"store URL {shown!r}: a Redis Cluster has only database 0")
    driver_url = url if not cluster else base + url[len(scheme):]
    return RedisTarget(url=driver_url, cluster=cluster)


def _check_option(name: str, value: str, shown: str) -> None:
    if name in _FILE_OPTIONS and not Path(value).is_file():
        raise ConfigError(f"store URL {shown!r}: {name}: no such file: {value}")
    if name in _DIRECTORY_OPTIONS and not Path(value).is_dir():
        raise ConfigError(f"store URL {shown!r}: {name}: no such directory: {value}")
    if name == "ssl_cert_reqs" and value.lower() not in _CERT_REQS:
        raise ConfigError(f"store URL {shown!r}: ssl_cert_reqs must be one of "
                          f"{', '.join(_CERT_REQS)} (got {value!r})")

