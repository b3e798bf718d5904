"""Redis store URLs, checked before the driver sees them.

redis-py's `from_url` takes the URL's query parameters as connection options
(`ssl_ca_certs`, `ssl_certfile`, `ssl_keyfile`, `ssl_cert_reqs`, `socket_timeout`, ...),
but it checks them only when it opens the first connection, and then a typo is a
TypeError and a missing certificate file reads like an unreachable server.  `parse`
checks them here, once, so that each mistake is one configuration error that names it.

`redis+cluster://` and `rediss+cluster://` name a Redis Cluster by one (or any) of its
nodes; the rest of such a URL is read as for `redis://` and `rediss://`.

`redis+sentinel://[user:password@]host:26379[,host2:26379,...]/MASTER[/db]` (and
`rediss+sentinel://`, TLS to the sentinels and the master) names a master by the
sentinels that watch it.  The user info and the query's options are the master's (and
its connections'); `sentinel_username` and `sentinel_password` in the query are the
sentinels' own, if they require one.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS

from supervisor.errors import ConfigError

CLUSTER_SUFFIX = "+cluster"
SENTINEL_SUFFIX = "+sentinel"
BASE_SCHEMES = ("redis", "rediss", "unix")
SCHEMES = frozenset({*BASE_SCHEMES, "redis" + CLUSTER_SUFFIX, "rediss" + CLUSTER_SUFFIX,
                     "redis" + SENTINEL_SUFFIX, "rediss" + SENTINEL_SUFFIX})
SENTINEL_PORT = 26379
_SENTINEL_AUTH = frozenset({"sentinel_username", "sentinel_password"})
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
class SentinelTarget:
    """A master behind Sentinel: the sentinels' addresses, the master's name, and the
    credentials of the sentinels themselves (None: they need none)."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    username: str | None = None
    password: str | None = None


@dataclass(frozen=True)
class RedisTarget:
    """What a store URL names: the URL for redis-py's `from_url` (for Sentinel: of the
    master, with a placeholder host), whether it is a cluster (to be opened with
    `RedisCluster`), and the sentinels if it is behind Sentinel."""

    url: str
    cluster: bool
    sentinel: SentinelTarget | None = None


def parse(url: str, shown: str) -> RedisTarget:
    """Check `url` (shown in errors as `shown`, its password redacted)."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed [ of an IPv6 address
        raise ConfigError(f"store URL {shown!r}: bad address: {exc}") from exc
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ConfigError(f"store URL {shown!r}: not a Redis URL")
    cluster = scheme.endswith(CLUSTER_SUFFIX)
    sentinel = scheme.endswith(SENTINEL_SUFFIX)
    base = scheme.removesuffix(CLUSTER_SUFFIX).removesuffix(SENTINEL_SUFFIX)
    query = parse_qsl(parts.query, keep_blank_values=True)
    for name, value in query:
        if sentinel and name in _SENTINEL_AUTH:
            continue
        if name not in (_CLUSTER_OPTIONS if cluster else _OPTIONS):
            kind = " for a Redis Cluster" if cluster and name in _OPTIONS else ""
            raise ConfigError(f"store URL {shown!r}: unknown parameter {name!r}{kind}")
        if name.startswith("ssl_") and base != "rediss":
            raise ConfigError(f"store URL {shown!r}: {name} is only for rediss:// "
                              f"(TLS), not {scheme}://")
        _check_option(name, value, shown)
    if cluster and parts.path.strip("/") not in ("", "0"):
        raise ConfigError(f"store URL {shown!r}: a Redis Cluster has only database 0")
    if sentinel:
        return _sentinel_target(url, base, query, shown)
    driver_url = url if not cluster else base + url[len(scheme):]
    return RedisTarget(url=driver_url, cluster=cluster)


def _sentinel_target(url: str, base: str, query: list[tuple[str, str]],
                     shown: str) -> RedisTarget:
    """A redis+sentinel:// URL read by hand: urlsplit takes no list of hosts."""
    rest = url.partition("://")[2].partition("#")[0]
    rest = rest.partition("?")[0]  # the query's options come in `query`, checked
    head, slash, path = rest.partition("/")
    userinfo, at, hosts = head.rpartition("@")
    sentinels = tuple(_sentinel_address(entry, shown) for entry in hosts.split(","))
    master, _, db = path.partition("/")
    db = db.strip("/")
    if not slash or not master:
        raise ConfigError(f"store URL {shown!r}: no master name (.../MASTER[/db] after "
                          f"the sentinels)")
    if "/" in db or (db and not db.isdigit()):
        raise ConfigError(f"store URL {shown!r}: the database after the master name must "
                          f"be a number (got {db!r})")
    options = dict(query)
    auth = {name: options.pop(name) for name in _SENTINEL_AUTH if name in options}
    master_url = (f"{base}://{userinfo}{at}sentinel-master/{db or 0}"
                  + (f"?{urlencode(options)}" if options else ""))
    return RedisTarget(url=master_url, cluster=False, sentinel=SentinelTarget(
        sentinels=sentinels, master=unquote(master),
        username=auth.get("sentinel_username"), password=auth.get("sentinel_password")))


def _sentinel_address(entry: str, shown: str) -> tuple[str, int]:
    """`host[:port]` or `[v6 address][:port]` of one sentinel."""
    text = entry.strip()
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":")
        if not bracket or (rest and not rest.startswith(":")):
            host = ""
    else:
        host, _, port_text = text.partition(":")
    if not host or any(c in host for c in " /@?#"):
        raise ConfigError(f"store URL {shown!r}: bad sentinel address {entry!r} "
                          f"(want host:port, separated by commas)")
    if not port_text:
        return host, SENTINEL_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(f"store URL {shown!r}: bad port in sentinel address {entry!r}")
    return host, int(port_text)


def _check_option(name: str, value: str, shown: str) -> None:
    if name in _FILE_OPTIONS and not Path(value).is_file():
        raise ConfigError(f"store URL {shown!r}: {name}: no such file: {value}")
    if name in _DIRECTORY_OPTIONS and not Path(value).is_dir():
        raise ConfigError(f"store URL {shown!r}: {name}: no such directory: {value}")
    if name == "ssl_cert_reqs" and value.lower() not in _CERT_REQS:
        raise ConfigError(f"store URL {shown!r}: ssl_cert_reqs must be one of "
                          f"{', '.join(_CERT_REQS)} (got {value!r})")

