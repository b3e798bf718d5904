"""Reaching a Redis that asks who is there: ACL users and passwords, TLS with client
certificates, and the one-line errors when the URL or the credentials are wrong."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.errors import ConfigError, StoreError, StoreUnavailable
from supervisor.store import opened_store
from supervisor.store.base import Store
from tests.helpers.redis_server import RedisServer
from tests.helpers.tls import make_tls_files, redis_server_lacks_tls
from tests.store.support import OWNER, claim_one, new_job, next_event, wait_for_work

pytestmark = pytest.mark.anyio

USER, PASSWORD = "app", "s3cr/et:pw"  # characters a URL must escape
ACL_ARGS = (
    "--user", USER, "on", f">{PASSWORD}", "~poolsup:*", "&poolsup:*", "+@all",
    "--user", "reader", "on", ">reader-pw", "~poolsup:*", "&poolsup:*", "+@all", "-evalsha",
    "--user", "deaf", "on", ">deaf-pw", "~poolsup:*", "+@all",
    # docs/stores.md's ACL: INFO (in @dangerous) is the claim script's master check.
    "--user", "careful", "on", ">careful-pw", "~poolsup:*", "&poolsup:*", "+@all",
    "-@dangerous", "+info",
    "--user", "default", "off",
)


@pytest.fixture(scope="module")
def acl_redis() -> Iterator[RedisServer]:
    server = RedisServer(username=USER, password=PASSWORD, args=ACL_ARGS).start()
    yield server
    server.remove()


async def dispatch_claim_complete_with_events(store: Store) -> None:
    await wait_for_work(store)
    async with store.events(OWNER) as events:
        await store.dispatch(new_job("k1"))
        await next_event(events, "wake")
    job = await claim_one(store)
    await store.complete(job.lease, b'{"ok": true}')
    assert (await store.job("k1")).state == "succeeded"


async def test_an_acl_user_with_a_password_runs_the_pool(
    acl_redis: RedisServer, pool_name: str
) -> None:
    async with opened_store(acl_redis.url, pool_name) as store:
        await dispatch_claim_complete_with_events(store)


async def test_the_documented_acl_runs_the_pool(acl_redis: RedisServer, pool_name: str) -> None:
    async with opened_store(acl_redis.url_as("careful", "careful-pw"), pool_name) as store:
        await dispatch_claim_complete_with_events(store)


@pytest.mark.parametrize(
    ("user", "password"),
    [(USER, "wrong-pw"), ("nobody", PASSWORD), (None, None)],
    ids=["wrong password", "unknown user", "no credentials (NOAUTH)"],
)
async def test_refused_credentials_say_authentication_failed_and_name_the_store(
    acl_redis: RedisServer, pool_name: str, user: str | None, password: str | None
) -> None:
    url = acl_redis.url_as(user, password)
    async with opened_store(url, pool_name) as store:
        for attempt in (store.ping, lambda: store.dispatch(new_job("k1"))):
            with pytest.raises(StoreUnavailable) as caught:
                await attempt()
            message = caught.value.message
            assert "authentication failed" in message
            assert f"127.0.0.1:{acl_redis.port}" in message
            assert "\n" not in message
            assert "wrong-pw" not in message and "s3cr" not in message


async def test_a_command_the_acl_user_may_not_run_is_a_store_error_that_says_so(
    acl_redis: RedisServer, pool_name: str
) -> None:
    async with opened_store(acl_redis.url_as("reader", "reader-pw"), pool_name) as store:
        with pytest.raises(StoreError) as caught:
            await store.dispatch(new_job("k1"))
    assert "not permitted" in caught.value.message
    assert "reader-pw" not in caught.value.message


async def test_events_on_a_channel_the_acl_user_may_not_read_are_a_store_error(
    acl_redis: RedisServer, pool_name: str
) -> None:
    async with opened_store(acl_redis.url_as("deaf", "deaf-pw"), pool_name) as store:
        with pytest.raises(StoreError, match="not permitted"):
            async with store.events(OWNER):
                pass


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    reason = redis_server_lacks_tls()
    if reason is not None:
        pytest.skip(reason)
    files = make_tls_files(tmp_path_factory.mktemp("tls"))
    server = RedisServer(tls=files).start()
    yield server
    server.remove()


async def test_the_store_works_over_tls_with_a_client_certificate(
    tls_redis: RedisServer, pool_name: str
) -> None:
    assert tls_redis.url.startswith("rediss://")
    async with opened_store(tls_redis.url, pool_name) as store:
        await dispatch_claim_complete_with_events(store)


async def test_tls_without_the_client_certificate_the_server_asks_for_is_unavailable(
    tls_redis: RedisServer, pool_name: str
) -> None:
    assert tls_redis.tls is not None
    url = f"rediss://127.0.0.1:{tls_redis.port}/0?ssl_ca_certs={tls_redis.tls.ca}"
    async with opened_store(url, pool_name) as store:
        with pytest.raises(StoreUnavailable, match="unreachable"):
            await store.ping()


@pytest.mark.parametrize("option", ["ssl_ca_certs", "ssl_certfile", "ssl_keyfile"])
async def test_a_missing_tls_file_is_a_one_line_config_error(
    tmp_path: Path, pool_name: str, option: str
) -> None:
    missing = tmp_path / "nowhere.pem"
    url = f"rediss://:pw@127.0.0.1:6380/0?{option}={missing}"
    with pytest.raises(ConfigError) as caught:
        async with opened_store(url, pool_name):
            pass
    message = caught.value.message
    assert option in message and str(missing) in message and "no such file" in message
    assert "pw@" not in message and "\n" not in message


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("redis://127.0.0.1:6379/0?ssl_ca_certs=/etc/hosts", "only for rediss://"),
        ("redis://127.0.0.1:6379/0?ssl_ca_cert=/etc/hosts", "unknown parameter 'ssl_ca_cert'"),
        ("rediss://127.0.0.1:6379/0?ssl_cert_reqs=always", "ssl_cert_reqs"),
        ("rediss://127.0.0.1:6379/0?ssl_ca_path=/etc/hosts", "no such directory"),
    ],
)
async def test_a_bad_url_parameter_is_a_one_line_config_error(
    pool_name: str, url: str, complaint: str
) -> None:
    with pytest.raises(ConfigError, match=complaint) as caught:
        async with opened_store(url, pool_name):
            pass
    assert "\n" not in caught.value.message
