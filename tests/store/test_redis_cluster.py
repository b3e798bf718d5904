"""What only a Redis Cluster store has: the cluster client's own errors, and where the
pool's keys and scripts run.  The conformance suite runs on the cluster too."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import anyio
import pytest
from redis.asyncio.cluster import RedisCluster

from supervisor.errors import ConfigError, StoreUnavailable
from supervisor.store import opened_store
from supervisor.store.records import Lease
from tests.helpers.redis_cluster import RedisClusterNodes
from tests.helpers.redis_server import RedisServer, free_port
from tests.store.support import LONG_TTL, OWNER, new_job

pytestmark = pytest.mark.anyio


async def test_an_unreachable_cluster_raises_store_unavailable(pool_name: str) -> None:
    url = f"redis+cluster://:hunter2@127.0.0.1:{free_port()}"
    async with opened_store(url, pool_name) as store:
        started = time.monotonic()
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: store.dispatch(new_job("k1")),
            lambda: store.renew(OWNER, "i-1", [Lease("k1", 1, OWNER)], LONG_TTL, {}),
            store.ping,
        ]
        for call in calls:
            with pytest.raises(StoreUnavailable, match="unreachable") as caught:
                await call()
            assert "hunter2" not in str(caught.value)
        assert time.monotonic() - started < 2


async def test_events_never_raise_while_the_cluster_is_unreachable(pool_name: str) -> None:
    url = f"redis+cluster://127.0.0.1:{free_port()}"
    async with opened_store(url, pool_name) as store, store.events(OWNER) as events:
        with anyio.move_on_after(0.5) as waited:
            await anext(events)
        assert waited.cancelled_caught


async def test_refused_credentials_of_a_cluster_say_authentication_failed(
    pool_name: str,
) -> None:
    # The cluster client authenticates before it asks for the slots, so a server that
    # is no cluster at all is enough to see how refused credentials are reported.
    server = RedisServer(password="right").start()
    try:
        url = f"redis+cluster://:wrong@127.0.0.1:{server.port}"
        async with opened_store(url, pool_name) as store:
            with pytest.raises(StoreUnavailable, match="authentication failed") as caught:
                await store.ping()
    finally:
        server.remove()
    assert "wrong" not in caught.value.message


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("redis+cluster://127.0.0.1:7000/3", "only database 0"),
        ("rediss+cluster://127.0.0.1:7000?ssl_password=x", "for a Redis Cluster"),
        ("redis+cluster://127.0.0.1:7000?ssl_cert_reqs=none", "only for rediss://"),
    ],
)
async def test_a_cluster_url_it_cannot_take_is_a_config_error(
    pool_name: str, url: str, complaint: str
) -> None:
    with pytest.raises(ConfigError, match=complaint):
        async with opened_store(url, pool_name):
            pass


async def test_every_key_of_a_pool_is_in_one_slot_on_one_node(
    redis_cluster: RedisClusterNodes, pool_name: str
) -> None:
    async with opened_store(redis_cluster.url, pool_name) as store:
        await store.dispatch(new_job("k1"))
        await store.notify("k1", b"{}")
    client = RedisCluster.from_url(redis_cluster.url.replace("redis+cluster", "redis"))
    try:
        keys = [key async for key in client.scan_iter(match=f"poolsup:{{{pool_name}}}:*",
                                                      target_nodes=RedisCluster.ALL_NODES)]
        slots = {client.keyslot(key) for key in keys}
        nodes = {client.get_node_from_key(key).name for key in keys}
    finally:
        await client.aclose()
    assert len(keys) >= 4 and len(slots) == 1 and len(nodes) == 1
