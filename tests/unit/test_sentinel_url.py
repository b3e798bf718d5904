"""redis+sentinel:// URLs: what they name, and a clear error for each mistake."""

from __future__ import annotations

import anyio
import pytest
import redis

from supervisor.errors import ConfigError
from supervisor.store.redis.connection import connect
from supervisor.store.redis.url import SentinelTarget, parse
from tests.helpers.redis_server import free_port


def target(url: str) -> tuple[str, SentinelTarget]:
    found = parse(url, url)
    assert found.sentinel is not None and not found.cluster
    return found.url, found.sentinel


def test_one_sentinel_default_port_and_database() -> None:
    url, sentinel = target("redis+sentinel://10.0.0.1/mymaster")
    assert sentinel == SentinelTarget(sentinels=(("10.0.0.1", 26379),), master="mymaster")
    assert url == "redis://sentinel-master/0"


def test_several_sentinels_credentials_and_database() -> None:
    url, sentinel = target(
        "redis+sentinel://app:s%40cret@a:26380,b:26381,[::1]:26382/mymaster/3")
    assert sentinel.sentinels == (("a", 26380), ("b", 26381), ("::1", 26382))
    assert sentinel.master == "mymaster"
    assert url == "redis://app:s%40cret@sentinel-master/3"  # the master's credentials


def test_sentinel_credentials_and_options_from_the_query() -> None:
    url, sentinel = target("redis+sentinel://a:1,b:2/m?sentinel_password=pw&"
                           "sentinel_username=watch&socket_timeout=2")
    assert (sentinel.username, sentinel.password) == ("watch", "pw")
    assert url == "redis://sentinel-master/0?socket_timeout=2"


def test_tls_options_only_with_rediss(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    url, _ = target(f"rediss+sentinel://a/m?ssl_ca_certs={ca}")
    assert url.startswith("rediss://sentinel-master/0?ssl_ca_certs=")
    with pytest.raises(ConfigError, match="only for rediss://"):
        parse(f"redis+sentinel://a/m?ssl_ca_certs={ca}", "shown")


@pytest.mark.parametrize(("url", "message"), [
    ("redis+sentinel://a:26379", "no master name"),
    ("redis+sentinel://a:26379/", "no master name"),
    ("redis+sentinel://a:26379//0", "no master name"),
    ("redis+sentinel://a:26379/m/x", "database after the master name must be a number"),
    ("redis+sentinel://a:26379/m/1/2", "database after the master name must be a number"),
    ("redis+sentinel://a:26379,,b/m", "bad sentinel address ''"),
    ("redis+sentinel://a:port/m", "bad port in sentinel address 'a:port'"),
    ("redis+sentinel://a:70000/m", "bad port"),
    ("redis+sentinel:///m", "bad sentinel address"),
    ("redis+sentinel://[::1/m", "bad address"),
    ("redis+sentinel://a,[::1/m", "bad address"),
    ("redis+sentinel://a/m?bogus=1", "unknown parameter 'bogus'"),
])
def test_bad_urls_are_one_line_config_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        parse(url, "shown")
    assert "\n" not in str(caught.value) and "shown" in str(caught.value)


def test_the_client_names_its_sentinels_and_master() -> None:
    connection = connect("redis+sentinel://u:pw@127.0.0.1:1,127.0.0.1:2/m/1")
    assert connection.sentinel is not None
    name, watchers = connection.sentinel
    assert name == "m"
    assert [w.connection_pool.connection_kwargs["port"] for w in watchers.sentinels] == [1, 2]
    kwargs = connection.client.connection_pool.connection_kwargs
    assert (kwargs["password"], kwargs["db"], kwargs["retry"].get_retries()) == ("pw", 1, 0)
    anyio.run(connection.aclose)


def test_the_urls_timeouts_win_over_the_defaults_for_sentinels_and_master() -> None:
    connection = connect("redis+sentinel://127.0.0.1:1/m?socket_timeout=2&"
                         "socket_connect_timeout=1&health_check_interval=7")
    assert connection.sentinel is not None
    kwargs = connection.client.connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"],
            kwargs["health_check_interval"]) == (2.0, 1.0, 7)
    for watcher in connection.sentinel[1].sentinels:
        kwargs = watcher.connection_pool.connection_kwargs
        assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (2.0, 1.0)
    anyio.run(connection.aclose)


def test_no_sentinel_answering_names_each_with_its_error() -> None:
    """Nothing listens on these ports: the error names each sentinel and why, in a line
    (redis-py's own lists the repr of each sentinel's client, some KB, without the cause)."""
    ports = [free_port(), free_port()]
    connection = connect(f"redis+sentinel://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/m")

    async def master() -> None:
        try:
            with pytest.raises(redis.ConnectionError) as caught:
                await connection.master_address()
            message = str(caught.value)
            assert message.startswith("no master found for 'm': "), message
            for port in ports:
                assert f"sentinel 127.0.0.1:{port}: Error 111 connecting" in message, message
            assert "\n" not in message and len(message) < 300, message
        finally:
            await connection.aclose()

    anyio.run(master)
