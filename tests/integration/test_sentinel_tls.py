"""rediss+sentinel:// for real: a master, a replica and three sentinels that all speak TLS
only and require client certificates (tests/helpers/redis_sentinel.py, `tls=`).  The
store, the client and a supervisor work through them; a failover is followed by the same
store object; a wrong CA, a missing client certificate, no TLS at all, or a refused
sentinel password is a short one-line store error that names the cause and each
sentinel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import psutil
import pytest

from supervisor.errors import StoreFailure, StoreUnavailable
from supervisor.store import opened_store
from supervisor.store.base import Store
from supervisor.store.redis.connection import connect
from tests.helpers.pool import finished, wait_for, write_pool
from tests.helpers.redis_sentinel import SentinelSetup
from tests.helpers.redis_server import RedisServer, TlsFiles
from tests.helpers.tls import make_tls_files, redis_server_lacks_tls
from tests.integration.conftest import Pool
from tests.store.support import OWNER, claim_one, new_job, next_event, wait_for_work

SENTINEL_PASSWORD = "watch/ful:pw"  # characters a URL must escape
ECHO = {"echo": {"path": "basic.py", "function": "echo"}}
# A one-line error names the cause and each sentinel; it is no dump of driver objects.
LONGEST_MESSAGE = 1200


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    reason = redis_server_lacks_tls()
    if reason is not None:
        pytest.skip(reason)
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA that signed none of the servers' certificates."""
    return make_tls_files(tmp_path_factory.mktemp("other-tls")).ca


@pytest.fixture(scope="module")
def tls_sentinel(tls_files: TlsFiles) -> Iterator[SentinelSetup]:
    setup = SentinelSetup(tls=tls_files).start()
    try:
        yield setup
    finally:
        setup.remove()


@pytest.fixture(scope="module")
def tls_sentinel_auth(tls_files: TlsFiles) -> Iterator[SentinelSetup]:
    """Sentinels that also require a password of their own."""
    setup = SentinelSetup(tls=tls_files, sentinel_password=SENTINEL_PASSWORD).start()
    try:
        yield setup
    finally:
        setup.remove()


@pytest.fixture
def failing_over(tls_files: TlsFiles) -> Iterator[SentinelSetup]:
    """A setup of the test's own, to kill its master."""
    setup = SentinelSetup(tls=tls_files, sentinel_password=SENTINEL_PASSWORD).start()
    try:
        yield setup
    finally:
        setup.remove()


async def dispatch_claim_complete(store: Store, key: str) -> None:
    await wait_for_work(store, lease_ttl=1)  # the pool's longest lease: a short hold
    async with store.events(OWNER) as events:  # pub/sub through the sentinels, over TLS
        await store.dispatch(new_job(key))
        await next_event(events, "wake")
    job = await claim_one(store, lease_ttl=1)  # a short hold after a failover
    await store.complete(job.lease, b'{"ok": true}')
    assert (await store.job(key)).state == "succeeded"


async def connections_closed(setup: SentinelSetup) -> None:
    """Wait, running the event loop, until this process holds no connection to `setup`.

    A connection refused after its TLS handshake (a wrong password, a missing client
    certificate) is closed a few loop iterations after the call failed, once the TLS
    shutdown is done; the test's event loop ends with the test, and a socket left closing
    then is a ResourceWarning in whichever later test the garbage collector runs."""
    ports = {*setup.sentinel_ports, *(server.port for server in setup.servers)}
    process = psutil.Process()
    listing = getattr(process, "net_connections", None) or process.connections
    with anyio.fail_after(5):
        while True:
            if not any(c.raddr and c.raddr.port in ports for c in listing(kind="tcp")):
                return
            await anyio.sleep(0.01)


def assert_short_line(message: str, setup: SentinelSetup) -> None:
    assert "\n" not in message
    assert len(message) < LONGEST_MESSAGE, message
    assert "Redis<" not in message and "connection_kwargs" not in message, message
    for port in setup.sentinel_ports:  # each sentinel, and what it answered
        assert f"sentinel 127.0.0.1:{port}: " in message, message


# --- the store on a rediss+sentinel:// URL -----------------------------------------------


@pytest.mark.anyio
async def test_a_store_dispatches_claims_and_completes_and_names_the_master(
    tls_sentinel: SentinelSetup, pool_name: str
) -> None:
    url = tls_sentinel.url
    assert url.startswith("rediss+sentinel://") and "ssl_ca_certs=" in url
    async with opened_store(url, pool_name) as store:
        await dispatch_claim_complete(store, "k1")
        snapshot = await store.snapshot()
    assert snapshot.store.master == f"127.0.0.1:{tls_sentinel.master.port}"


@pytest.mark.anyio
async def test_timeouts_in_the_query_reach_the_sentinels_and_the_master(
    tls_sentinel: SentinelSetup, pool_name: str
) -> None:
    """The URL's options win over poolsup's defaults, as for rediss://; the sentinels'
    connections take its timeouts and TLS files too."""
    assert tls_sentinel.tls is not None
    url = tls_sentinel.url_with(socket_timeout="2.5", socket_connect_timeout="1.5")
    connection = connect(url)
    try:
        assert connection.sentinel is not None
        pools = [w.connection_pool for w in connection.sentinel[1].sentinels]
        pools.append(connection.client.connection_pool)
        for pool in pools:
            kwargs = pool.connection_kwargs
            assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (2.5, 1.5)
            assert kwargs["ssl_ca_certs"] == str(tls_sentinel.tls.ca)
            assert kwargs["retry"].get_retries() == 0
    finally:
        await connection.aclose()
    async with opened_store(url, pool_name) as store:
        await dispatch_claim_complete(store, "k1")

@pytest.mark.anyio
@pytest.mark.parametrize("mistake", ["wrong CA", "no client certificate", "no TLS"])
async def test_tls_mistakes_are_a_short_one_line_store_error_at_once(
    tls_sentinel: SentinelSetup, other_ca: Path, pool_name: str, mistake: str
) -> None:
    url, cause = {
        "wrong CA": (tls_sentinel.url_with(ssl_ca_certs=str(other_ca)),
                     "certificate verify failed"),
        "no client certificate": (tls_sentinel.url_with(ssl_certfile="", ssl_keyfile=""),
                                  "127.0.0.1"),
        "no TLS": ("redis+sentinel://" + tls_sentinel.url.split("://", 1)[1].split("?")[0],
                   "127.0.0.1"),
    }[mistake]
    async with opened_store(url, pool_name) as store:
        for call in (store.ping, lambda: store.dispatch(new_job("k1")), store.snapshot):
            started = time.monotonic()
            with anyio.fail_after(15), pytest.raises(StoreUnavailable) as caught:
                await call()
            assert time.monotonic() - started < 10
            message = caught.value.message
            assert_short_line(message, tls_sentinel)
            assert "unreachable" in message and cause in message, message
            assert "no master found for 'poolsup'" in message, message
    await connections_closed(tls_sentinel)


@pytest.mark.anyio
async def test_a_master_name_the_sentinels_do_not_watch_says_so(
    tls_sentinel: SentinelSetup, pool_name: str
) -> None:
    url = tls_sentinel.url.replace("/poolsup/0?", "/elsewhere/0?")
    async with opened_store(url, pool_name) as store:
        with anyio.fail_after(15), pytest.raises(StoreUnavailable) as caught:
            await store.ping()
    message = caught.value.message
    assert_short_line(message, tls_sentinel)
    assert "no master found for 'elsewhere'" in message
    assert message.count("watches no master of that name") == 3, message
    await connections_closed(tls_sentinel)


def test_the_cli_says_a_wrong_ca_in_one_line_and_exits_1(
    tls_sentinel: SentinelSetup, other_ca: Path, tmp_path: Path, pool_name: str
) -> None:
    config = write_pool(tmp_path, store=tls_sentinel.url_with(ssl_ca_certs=str(other_ca)),
                        pool=pool_name, handlers=ECHO)
    result = subprocess.run([sys.executable, "-m", "supervisor.cli", "status", "-c",
                             str(config)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1, result
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert "certificate verify failed" in result.stderr
    assert_short_line(result.stderr.strip(), tls_sentinel)


# --- sentinels with a password of their own, over TLS ------------------------------------


@pytest.mark.anyio
async def test_sentinels_with_a_password_over_tls(
    tls_sentinel_auth: SentinelSetup, pool_name: str
) -> None:
    setup = tls_sentinel_auth
    assert "sentinel_password=" in setup.url
    async with opened_store(setup.url, pool_name) as store:
        await dispatch_claim_complete(store, "k1")
        assert (await store.snapshot()).store.master == f"127.0.0.1:{setup.master.port}"


@pytest.mark.anyio
@pytest.mark.parametrize("password", ["wrong-pw", ""], ids=["wrong password", "none"])
async def test_a_refused_sentinel_password_says_authentication_failed(
    tls_sentinel_auth: SentinelSetup, pool_name: str, password: str
) -> None:
    url = tls_sentinel_auth.url_with(sentinel_password=password)
    async with opened_store(url, pool_name) as store:
        for call in (store.ping, store.snapshot):
            with anyio.fail_after(15), pytest.raises(StoreUnavailable) as caught:
                await call()
            message = caught.value.message
            assert "authentication failed" in message, message
            assert_short_line(message, tls_sentinel_auth)
            assert "wrong-pw" not in message and "watch" not in message
    await connections_closed(tls_sentinel_auth)


# --- a failover -------------------------------------------------------------------------


def replicated(setup: SentinelSetup, master: RedisServer, replica: RedisServer) -> bool:
    def offset(port: int, field: str) -> int:
        info = setup.cli(port, "INFO", "replication")
        return int(info.split(f"{field}:")[1].split()[0])
    return offset(replica.port, "slave_repl_offset") >= offset(master.port, "master_repl_offset")


@pytest.mark.anyio
async def test_the_same_store_follows_a_failover(
    failing_over: SentinelSetup, pool_name: str
) -> None:
    """The master is SIGKILLed: calls fail (StoreUnavailable, one line) until Sentinel
    has promoted the replica, then the same store object works on the new master, over
    TLS, through sentinels that ask for their password."""
    setup = failing_over
    master, replica = setup.master, setup.replica
    async with opened_store(setup.url, pool_name) as store:
        await dispatch_claim_complete(store, "before")
        wait_for(lambda: replicated(setup, master, replica), 10, message="replication")
        os.kill(master.pid, signal.SIGKILL)
        failures: list[str] = []
        deadline = time.monotonic() + 30
        n = 0
        while True:
            n += 1
            try:
                with anyio.fail_after(15):
                    await store.dispatch(new_job(f"after-{n}"))
                break
            except StoreFailure as exc:
                failures.append(exc.message)
                assert time.monotonic() < deadline, failures[-3:]
                await anyio.sleep(0.2)
        assert failures, "no call failed while the master was down"
        assert all("\n" not in m and len(m) < LONGEST_MESSAGE for m in failures), failures
        assert setup.wait_failover(master) is replica
        assert (await store.snapshot()).store.master == f"127.0.0.1:{replica.port}"
        assert (await store.job("before")).state == "succeeded"  # replicated
        # The new master holds claims for the pool's longest lease_ttl (1 s) + 1 s.
        held: list[float | None] = []
        job = None
        deadline = time.monotonic() + 20
        while job is None:
            batch = await store.claim("sup-a", ["thumbnail"], 1, 1.0, 3)
            job = batch.jobs[0] if batch.jobs else None
            held.append(batch.held_until)
            assert time.monotonic() < deadline, "no claim after the hold"
            if job is None:
                await anyio.sleep(0.2)
        assert held[0] is not None, "the new master did not hold claims"
        assert job.key == f"after-{n}"
        await store.complete(job.lease, b"{}")
        assert (await store.job(job.key)).state == "succeeded"


# --- certificates that name hosts, not addresses ----------------------------------------


@pytest.fixture(scope="module")
def host_tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """Server certificates for the name localhost only (no IP address in them)."""
    reason = redis_server_lacks_tls()
    if reason is not None:
        pytest.skip(reason)
    return make_tls_files(tmp_path_factory.mktemp("host-tls"), server_names=("localhost",))


@pytest.fixture(scope="module")
def sentinel_by_address(host_tls_files: TlsFiles) -> Iterator[SentinelSetup]:
    """Sentinels that name the master by its IP address (as they do by default)."""
    setup = SentinelSetup(tls=host_tls_files).start()
    try:
        yield setup
    finally:
        setup.remove()


@pytest.fixture(scope="module")
def sentinel_by_name(host_tls_files: TlsFiles) -> Iterator[SentinelSetup]:
    """Sentinels that name the master, the replicas and each other by host name."""
    setup = SentinelSetup(tls=host_tls_files, host="localhost").start()
    try:
        yield setup
    finally:
        setup.remove()


@pytest.mark.anyio
async def test_sentinels_that_announce_host_names_pass_the_hostname_checks(
    sentinel_by_name: SentinelSetup, pool_name: str
) -> None:
    setup = sentinel_by_name
    assert setup.url.startswith("rediss+sentinel://localhost:")
    async with opened_store(setup.url, pool_name) as store:
        await dispatch_claim_complete(store, "k1")
        assert (await store.snapshot()).store.master == f"localhost:{setup.master.port}"
    by_address = setup.url.replace("localhost:", "127.0.0.1:")
    async with opened_store(by_address, pool_name) as store:
        with anyio.fail_after(15), pytest.raises(StoreUnavailable) as caught:
            await store.ping()
    assert_short_line(caught.value.message, setup)
    assert "certificate is not valid for '127.0.0.1'" in caught.value.message
    await connections_closed(setup)


@pytest.mark.anyio
async def test_the_master_is_checked_by_the_address_the_sentinels_give(
    sentinel_by_address: SentinelSetup, pool_name: str
) -> None:
    """The sentinels are reached by a name the certificates hold, but they name the master
    by its address, which the certificates do not: its connection fails, and says so.
    `ssl_check_hostname=false` (the CA is still checked) lets it through."""
    setup = sentinel_by_address
    by_name = setup.url.replace("127.0.0.1:", "localhost:")
    async with opened_store(by_name, pool_name) as store:
        with anyio.fail_after(15), pytest.raises(StoreUnavailable) as caught:
            await store.ping()
    message = caught.value.message
    assert "\n" not in message and len(message) < LONGEST_MESSAGE, message
    assert f"127.0.0.1:{setup.master.port}" in message, message
    assert "certificate is not valid for '127.0.0.1'" in message, message
    unchecked = setup.url_with(ssl_check_hostname="false")
    async with opened_store(unchecked, pool_name) as store:
        await dispatch_claim_complete(store, "k1")
        assert (await store.snapshot()).store.master == f"127.0.0.1:{setup.master.port}"

# --- the client and a supervisor --------------------------------------------------------


def test_a_supervisor_and_the_client_run_a_job_on_rediss_sentinel(
    tls_sentinel: SentinelSetup, tmp_path: Path, pool_name: str
) -> None:
    pool = Pool(tmp_path, tls_sentinel.url, pool_name)
    try:
        config = pool.config(ECHO, id="tls-1", lease_ttl=3)
        pool.start(config)
        client = pool.client()
        client.dispatch("k1", {"n": 1}, handler="echo")
        record = wait_for(lambda: finished(client, "k1"), 20, message="the job to finish")
        assert record["state"] == "succeeded", record
        assert record["result"]["payload"] == {"n": 1}
        assert client.status()["store"]["master"] == f"127.0.0.1:{tls_sentinel.master.port}"
        shown = subprocess.run([sys.executable, "-m", "supervisor.cli", "status", "-c",
                                str(config), "--json"], capture_output=True, text=True,
                               timeout=30)
        assert shown.returncode == 0, shown.stderr
        status = json.loads(shown.stdout)
        assert status["store"]["master"] == f"127.0.0.1:{tls_sentinel.master.port}"
        assert [s["id"] for s in status["supervisors"]] == ["tls-1"]
    finally:
        pool.close()

