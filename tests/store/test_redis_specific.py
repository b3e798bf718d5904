"""What only the Redis store has: Lua scripts, the key layout, connection trouble."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import orjson
import pytest
from redis.asyncio import Redis

from supervisor.errors import ConfigError, StoreError, StoreUnavailable
from supervisor.redaction import redact_url
from supervisor.store import open_store, opened_store
from supervisor.store.base import Store
from supervisor.store.records import Lease, StoreEvent
from supervisor.store.redis.connection import connect
from supervisor.store.redis.events import EventFeed
from supervisor.store.redis.keys import PoolKeys
from supervisor.store.redis.scripts import KeysChanged, Scripts, Status, commands
from supervisor.store.redis.store import LAYOUT
from tests.helpers.redis_server import RedisServer, free_port
from tests.store.support import (
    HANDLER,
    LONG_TTL,
    OWNER,
    claim,
    claim_one,
    dispatch_all,
    new_job,
    next_event,
    supervisor,
)

pytestmark = pytest.mark.anyio

EXPECTED_COMMANDS = {
    "ack-notifications", "tidy",
    "dispatch", "claim", "renew", "complete", "fail", "release", "snooze", "finish-stopped",
    "stop",
    "notify", "take-notifications", "register", "deregister", "forget", "upgrade-layout",
    "save-checkpoint", "members", "fire-tick", "record-tick-outcome", "schedules",
    "prune-schedule-jobs", "counts",
    "retry", "append-output", "output", "job-fields",
}


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def store(redis_url: str, pool_name: str) -> AsyncIterator[Store]:
    async with opened_store(redis_url, pool_name) as store:
        yield store


async def test_every_command_script_compiles_and_documents_its_interface(raw: Redis) -> None:
    assert set(commands()) == EXPECTED_COMMANDS
    for command in commands().values():
        header = command.source.split("local OK", 1)[1]  # past _lib.lua's own comments
        for label in ("-- KEYS:", "-- ARGV:", "-- Returns:"):
            assert label in header, (command.name, label)
        await raw.script_load(command.source)


# The scripts that find jobs while they run, and so touch keys no caller could declare;
# each says which in an "Undeclared keys" line of its header.
UNDECLARED_KEYS = {"claim", "members", "upgrade-layout"}
KEY_BUILDERS = re.compile(r"\b(prefix|job_key|notes_key|queue_key|reserved_key)\b")


def test_scripts_touch_only_keys_declared_in_keys_but_the_documented_few() -> None:
    for command in commands().values():
        builds_names = KEY_BUILDERS.search(command.body)
        if command.name in UNDECLARED_KEYS:
            assert "-- Undeclared keys" in command.body, command.name
        else:
            # Without the key prefix a script can name no key but those in KEYS.
            assert builds_names is None, (command.name, builds_names)


@pytest.mark.parametrize(
    ("name", "counts", "refused"),
    [("dispatch", [7, 11, 15], [6, 8, 10]), ("renew", [4, 6, 8], [3, 5, 7]),
     ("claim", [10, 11, 12], [9])],
)
def test_a_script_refuses_a_key_count_its_file_name_does_not_allow(
    name: str, counts: list[int], refused: list[int]
) -> None:
    command = commands()[name]
    for count in counts:
        command.check_key_count(count)
    for count in refused:
        with pytest.raises(ValueError, match=f"{name} takes"):
            command.check_key_count(count)


async def test_stop_changes_nothing_when_the_declared_queue_is_no_longer_the_jobs(
    store: Store, raw: Redis, pool_name: str
) -> None:
    keys = PoolKeys(pool_name)
    await store.dispatch(new_job("k1"))
    declared = [keys.job("k1"), keys.notes("k1"), keys.pending, keys.running,
                keys.done("stopped"), keys.queue("other"), keys.reserved(""),
                keys.schedule("")]

    with pytest.raises(KeysChanged):
        await Scripts(raw).run("stop", declared, ["k1", 1000, keys.channel, "other", "", "", ""],
                               subject="k1")

    assert (await store.job("k1")).state == "pending"
    assert await raw.zscore(keys.queue(HANDLER), "k1") is not None


def test_status_codes_match_the_lua_library() -> None:
    source = commands()["dispatch"].source
    match = re.search(r"local (OK[\w, ]+) = ([\d, ]+)", source)
    assert match is not None
    names, values = match.groups()
    lua = dict(zip(names.split(", "), map(int, values.split(", ")), strict=True))
    assert lua == {status.name: status.value for status in Status}


async def test_all_keys_of_a_pool_share_its_hash_tag(
    store: Store, raw: Redis, pool_name: str
) -> None:
    await store.register(supervisor(OWNER))
    await dispatch_all(store, ["a", "b", "c"])
    await store.notify("c", b"{}")
    a, b = (await claim(store, 2)).jobs
    await store.renew(OWNER, "i-1", [a.lease, b.lease], LONG_TTL, {})
    await store.complete(a.lease, b"1")
    await store.fail(b.lease, "boom", final=True, retry_delay=0)
    await store.stop("c")
    await store.dispatch(new_job("d"))
    await store.release((await claim_one(store)).lease, reserve_for="sup-b",
                        reserve_ttl=LONG_TTL)

    names = [name.decode() async for name in raw.scan_iter(match=f"*{pool_name}*")]

    assert len(names) >= 9
    assert PoolKeys(pool_name).reserved("sup-b") in names
    for name in names:
        tag = re.search(r"\{([^}]*)\}", name)
        assert tag is not None and tag[1] == pool_name, name
        assert name.startswith(PoolKeys(pool_name).prefix), name


async def test_finished_records_expire_in_redis(store: Store, raw: Redis, pool_name: str) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    assert await raw.pttl(PoolKeys(pool_name).job("k1")) == -1

    await store.complete(job.lease, b"1")

    assert 0 < await raw.pttl(PoolKeys(pool_name).job("k1")) <= 86_400_000


async def test_a_runs_output_keys_share_the_hash_tag_expire_with_the_record_and_stay_bounded(
    store: Store, raw: Redis, pool_name: str
) -> None:
    keys = PoolKeys(pool_name)
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    for n in range(50):
        await store.append_output(job.lease, 1, b"z" * 100_000, at=n * 100_000,
                                  max_bytes=1_000_000)
        assert await raw.strlen(keys.output_run("k1", job.token)) <= 1_000_000 + 250_000
    assert await raw.pttl(keys.output("k1")) == -1

    await store.complete(job.lease, b"1")

    job_ttl = await raw.pttl(keys.job("k1"))
    for name in (keys.output("k1"), keys.output_run("k1", job.token)):
        assert name.startswith(keys.prefix)
        # Set in the same script as the record's; PTTL rounds each to the millisecond.
        assert abs(await raw.pttl(name) - job_ttl) <= 50
    await store.dispatch(new_job("k1"))
    assert not await raw.exists(keys.output("k1"), keys.output_run("k1", job.token))


async def test_unknown_url_scheme_is_a_config_error(pool_name: str) -> None:
    with pytest.raises(ConfigError, match="mysql"):
        await open_store("mysql://user:secret@host/db", pool_name)


@pytest.mark.parametrize("pool", ["", "a{b", "}x"])
async def test_pool_names_that_would_break_the_hash_tag_are_refused(
    redis_url: str, pool: str
) -> None:
    with pytest.raises(ConfigError):
        await open_store(redis_url, pool)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://user:pw@host:6379/0", "redis://user:***@host:6379/0"),
        ("rediss://:pw@[::1]:6380/2", "rediss://:***@[::1]:6380/2"),
        ("unix:///run/redis.sock?db=1&password=pw", "unix:///run/redis.sock?db=1&password=***"),
        ("rediss://h/0?ssl_keyfile=/k.pem&ssl_password=pw",
         "rediss://h/0?ssl_keyfile=/k.pem&ssl_password=***"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ],
)
def test_urls_in_messages_hide_the_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


async def test_an_unreachable_redis_raises_store_unavailable_quickly(pool_name: str) -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    async with opened_store(url, pool_name) as store:
        started = time.monotonic()
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: store.dispatch(new_job("k1")),
            lambda: store.claim(OWNER, ["h"], 1, LONG_TTL, 3),
            lambda: store.renew(OWNER, "i-1", [Lease("k1", 1, OWNER)], LONG_TTL, {}),
            store.ping,
        ]
        for call in calls:
            with pytest.raises(StoreUnavailable, match="unreachable") as caught:
                await call()
            assert "hunter2" not in str(caught.value)
        assert time.monotonic() - started < 2


async def test_a_frozen_redis_raises_store_unavailable(
    own_redis: RedisServer, pool_name: str
) -> None:
    async with opened_store(own_redis.url, pool_name) as store:
        await store.ping()
        own_redis.pause()
        try:
            with anyio.fail_after(10), pytest.raises(StoreUnavailable):
                await store.claim(OWNER, ["h"], 1, LONG_TTL, 3)
        finally:
            own_redis.resume()
        await store.ping()


async def test_events_never_raise_while_redis_is_unreachable(pool_name: str) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    async with opened_store(url, pool_name) as store, store.events(OWNER) as events:
        with anyio.move_on_after(0.5) as waited:
            await anext(events)
        assert waited.cancelled_caught


async def test_events_resume_with_a_wake_after_redis_restarts(
    own_redis: RedisServer, pool_name: str
) -> None:
    async with opened_store(own_redis.url, pool_name) as store, store.events(OWNER) as events:
        own_redis.stop()
        own_redis.start()

        assert await next_event(events, "wake", within=10) == StoreEvent("wake")
        await store.dispatch(new_job("k1"))
        await claim_one(store)
        await store.notify("k1", b"{}")
        assert await next_event(events, "notify") == StoreEvent("notify", "k1")


async def test_events_notice_a_frozen_redis_and_wake_once_it_is_back(
    own_redis: RedisServer,
) -> None:
    client = connect(own_redis.url).client
    feed = EventFeed(client, ["poolsup:{probe}:events"], where="test", probe_after=0.2)
    try:
        await feed.start()
        own_redis.pause()
        try:
            with anyio.move_on_after(1.0):
                await anext(feed)
        finally:
            own_redis.resume()

        with anyio.fail_after(10):
            assert await anext(feed) == StoreEvent("wake")
    finally:
        await feed.aclose()
        await client.aclose()


@pytest.fixture
async def own_raw(own_redis: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(own_redis.url)
    yield client
    await client.aclose()


async def _store_with_work(store: Store) -> None:
    await store.register(supervisor(OWNER))
    await dispatch_all(store, ["busy", "waiting"])
    await claim_one(store)


async def test_snapshot_and_members_work_while_redis_is_out_of_memory(
    own_redis: RedisServer, own_raw: Redis, pool_name: str
) -> None:
    async with opened_store(own_redis.url, pool_name) as store:
        await _store_with_work(store)
        healthy = await store.snapshot()
        await own_raw.script_flush()  # the scripts are loaded again under OOM
        await own_raw.config_set("maxmemory-policy", "noeviction")
        await own_raw.config_set("maxmemory", 1)
        try:
            membership = await store.members()
            snapshot = await store.snapshot()
            counts = await store.counts()
            with pytest.raises(StoreError, match="maxmemory"):
                await store.dispatch(new_job("more"))
            with pytest.raises(StoreError, match="maxmemory"):
                await claim(store)
        finally:
            await own_raw.config_set("maxmemory", 0)

        assert snapshot.store.state == "failing"
        assert snapshot.store.error is not None and "maxmemory" in snapshot.store.error
        assert snapshot.store.since == pytest.approx(healthy.store_time, abs=0.05)
        assert snapshot.counts == counts == healthy.counts
        assert snapshot.counts["pending"] == 1 and snapshot.counts["running"] == 1
        assert [r.key for r in snapshot.running] == ["busy"]
        assert [s.info.id for s in snapshot.supervisors] == [OWNER]
        assert [(m.info.id, m.running_by_handler) for m in membership.members] == [
            (OWNER, {HANDLER: 1})
        ]
        assert (await store.snapshot()).store.state == "ok"


async def test_a_read_only_replica_is_a_store_error(
    own_redis: RedisServer, own_raw: Redis, pool_name: str
) -> None:
    async with opened_store(own_redis.url, pool_name) as store:
        await _store_with_work(store)
        await own_raw.replicaof("127.0.0.1", str(free_port()))
        try:
            with pytest.raises(StoreError, match="read only"):
                await store.dispatch(new_job("more"))
            snapshot = await store.snapshot()
            membership = await store.members()
            counts = await store.counts()
        finally:
            await own_raw.replicaof("NO", "ONE")

        assert snapshot.store.state == "failing"
        assert snapshot.counts["running"] == counts["running"] == 1
        assert [(m.info.id, m.running) for m in membership.members] == [(OWNER, 1)]


async def test_pending_jobs_of_a_pool_written_before_the_claim_queues_are_claimed(
    raw: Redis, redis_url: str, pool_name: str
) -> None:
    keys = PoolKeys(pool_name)
    async with opened_store(redis_url, pool_name) as writer:
        await dispatch_all(writer, ["old-1", "old-2"])
    # What a pool written by the layout before per-handler queues looks like.
    await raw.delete(keys.queue("thumbnail"), keys.layout)

    async with opened_store(redis_url, pool_name) as upgraded:
        batch = await claim(upgraded, 2)

    assert sorted(job.key for job in batch.jobs) == ["old-1", "old-2"]
    assert await raw.get(keys.layout) == str(LAYOUT).encode()


async def test_running_counts_left_wrong_by_an_older_supervisor_are_recounted(
    raw: Redis, redis_url: str, pool_name: str
) -> None:
    keys = PoolKeys(pool_name)
    async with opened_store(redis_url, pool_name) as old:
        await old.register(supervisor(OWNER))
        await dispatch_all(old, ["a", "b", "c"])
        await claim(old, 2)
    # An older supervisor starts and ends runs without counting them.
    await raw.hset(keys.running_load, mapping={f"{OWNER}\0{HANDLER}": 7, "gone\0x": 1,
                                               HANDLER: 9})

    async with opened_store(redis_url, pool_name) as upgraded:
        await claim(upgraded, 0, owner="sup-new")
        members = (await upgraded.members()).members

    assert [(m.info.id, m.running_by_handler) for m in members] == [(OWNER, {HANDLER: 2})]
    assert await raw.hgetall(keys.running_load) == {f"{OWNER}\0{HANDLER}".encode(): b"2",
                                                    HANDLER.encode(): b"2"}


async def test_a_membership_entry_written_before_handlers_and_rebalance_still_reads(
    store: Store, raw: Redis, pool_name: str
) -> None:
    keys = PoolKeys(pool_name)
    await store.register(supervisor("sup-a"))
    entry = {"id": "sup-a", "instance": "i-1", "host": "h", "pid": 1, "capacity": 2,
             "lease_ttl": LONG_TTL, "state": "running", "started_at": 1.0}
    await raw.hset(keys.supervisors, "sup-a", orjson.dumps(entry))

    (member,) = (await store.members()).members

    assert (member.info.id, member.info.handlers, member.info.rebalance) == ("sup-a", (), ())
    assert (await store.snapshot()).supervisors[0].info == member.info
