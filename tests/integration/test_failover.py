"""Guarantee 12: a failover of the store's master (Sentinel, Cluster) never runs a job
twice at once, even when it loses the last writes; tokens keep growing across it.

Real redis-server and sentinel processes, real supervisors and children.  The lost
writes are made for real: the replica is cut off (frozen, its link dropped) while the
master acknowledges a claim, then the master is SIGKILLed and the replica, thawed, is
promoted without it.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from supervisor import Client
from supervisor.errors import StoreFailure
from supervisor.store.redis.keys import PoolKeys
from supervisor.store.redis.store import NO_LOCK_DELAY_ENV
from tests.helpers.pool import (
    FINISHED,
    SupervisorProcess,
    assert_one_process_at_a_time,
    lifetimes,
    read_ledger,
    wait_for,
)
from tests.helpers.redis_cluster import RedisClusterNodes
from tests.helpers.redis_sentinel import SentinelSetup, cli
from tests.helpers.redis_server import RedisServer
from tests.integration.conftest import Pool

LEDGER = {"ledger": {"path": "ledger.py", "timeout": 0, "max_attempts": 3}}
# Long enough that a renewal reaches the new master before the child's fence (so a
# lease the new master holds goes on), and that the first child, fenced only by its
# deadline, is still alive when the new master is found (some 3 to 6 s after the kill):
# without the lock-delay they meet.
LOST_LEASE_TTL = 10


@pytest.fixture
def sentinel() -> Iterator[SentinelSetup]:
    setup = SentinelSetup().start()
    yield setup
    setup.remove()


@pytest.fixture
def sentinel_pool(tmp_path: Path, sentinel: SentinelSetup, pool_name: str) -> Iterator[Pool]:
    pool = Pool(tmp_path, sentinel.url, pool_name)
    yield pool
    pool.close()


def retried(call: Callable[[], Any]) -> Any:
    """`call`'s answer, or None while the store fails (over)."""
    try:
        return call()
    except StoreFailure:
        return None


def job(client: Client, key: str) -> dict[str, Any] | None:
    return retried(lambda: client.job(key))


def replicated(master: RedisServer, replica: RedisServer) -> bool:
    """The replica has everything the master wrote so far."""
    def offset(port: int, field: str) -> int:
        info = cli(port, "INFO", "replication")
        return int(info.split(f"{field}:")[1].split()[0])
    return offset(replica.port, "slave_repl_offset") >= offset(master.port, "master_repl_offset")


def cut_off(master: RedisServer, replica: RedisServer) -> None:
    """From now on the replica gets none of the master's writes: it is frozen (so it
    cannot connect again), and the master drops its link (so nothing more is sent to it,
    not even into the socket's buffer, which a thawed replica would still read)."""
    os.kill(replica.pid, signal.SIGSTOP)
    cli(master.port, "CLIENT", "KILL", "TYPE", "replica")


def thaw(server: RedisServer) -> None:
    os.kill(server.pid, signal.SIGCONT)


def start_pair(pool: Pool, **settings: Any) -> list[SupervisorProcess]:
    return [pool.start(pool.config(LEDGER, file=f"{name}.toml", id=name, capacity=4,
                                   lease_ttl=LOST_LEASE_TTL, **settings))
            for name in ("a", "b")]


def alive(pid: int) -> bool:
    return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


def run_warm_up(client: Client, ledger: Path) -> int:
    """A job run to its end, so that the pool has handed out leases; its token."""
    client.dispatch("warm-up", {"ledger": str(ledger), "seconds": 0.05}, handler="ledger")
    record = wait_for(lambda: (r := job(client, "warm-up")) and r["state"] in FINISHED and r,
                      30, message="the warm-up job")
    assert record["state"] == "succeeded"
    return int(record["token"])


def lose_a_claim(pool: Pool, client: Client, ledger: Path, master: RedisServer,
                 replica: RedisServer) -> tuple[str, int, int]:
    """A job dispatched and replicated, then claimed once the replica is cut off: the
    master acknowledges a claim the replica never gets.  (holder id, pid, token)."""
    client.dispatch("lost", {"ledger": str(ledger), "seconds": 40}, handler="ledger",
                    run_at=time.time() + 3)
    wait_for(lambda: replicated(master, replica), 10, message="the dispatch to replicate")
    cut_off(master, replica)
    assert client.job("lost")["state"] == "pending", "claimed before the replica was cut off"
    record = wait_for(lambda: (r := client.job("lost"))["state"] == "running" and r["pid"] and r,
                      15, message="the job to start on the old master")
    return record["supervisor"], record["pid"], int(record["token"])


def test_guarantee_12_sentinel_failover_that_loses_a_claim_runs_no_job_twice(
    sentinel: SentinelSetup, sentinel_pool: Pool, ledger: Path
) -> None:
    """The new master holds `lost` pending although its child runs on; the lock-delay
    keeps every claim back until that child has fenced itself.  Without it (the test-only
    switch), the job starts a second time beside its first child: red."""
    spans, killed_at = run_a_lost_claim_again(sentinel, sentinel_pool, ledger, env={})
    assert_one_process_at_a_time(read_ledger(ledger))
    assert spans[1][2] - killed_at > LOST_LEASE_TTL  # held back for the longest lease


def test_without_the_lock_delay_a_lost_claim_runs_twice_at_once(
    sentinel: SentinelSetup, sentinel_pool: Pool, ledger: Path
) -> None:
    """The scenario is real: with the lock-delay switched off (the test-only switch),
    the same failover starts the job again while its first child still runs."""
    spans, _ = run_a_lost_claim_again(sentinel, sentinel_pool, ledger,
                                      env={NO_LOCK_DELAY_ENV: "1"})
    with pytest.raises(AssertionError, match="was alive until"):
        assert_one_process_at_a_time(read_ledger(ledger))
    assert spans[1][2] < spans[0][3]


def run_a_lost_claim_again(sentinel: SentinelSetup, pool: Pool, ledger: Path,
                           env: dict[str, str]) -> tuple[list[Any], float]:
    """Lose a claim in a failover and wait until its job runs again; its processes'
    spans (pid, token, first, last) and when the master was killed (monotonic)."""
    supervisors = {name: pool.start(pool.config(
        LEDGER, file=f"{name}.toml", id=name, capacity=4, lease_ttl=LOST_LEASE_TTL), env=env)
        for name in ("a", "b")}
    client = pool.client()
    warm_token = run_warm_up(client, ledger)
    master, replica = sentinel.master, sentinel.replica
    holder, first_pid, first_token = lose_a_claim(pool, client, ledger, master, replica)
    # The holder is frozen: only its fork server's fence ends its child now.
    supervisors[holder].signal(signal.SIGSTOP)
    os.kill(master.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    thaw(replica)
    sentinel.wait_failover(master)
    try:
        wait_for(lambda: len(lifetimes(read_ledger(ledger)).get("lost", [])) >= 2,
                 LOST_LEASE_TTL + 20, interval=0.05, message="the lost job to run again")
        # Thawed only once its fork server has fenced the first child: a thawed
        # supervisor would hear of the lost lease and end that child early.
        wait_for(lambda: not alive(first_pid), LOST_LEASE_TTL, message="the fence")
    finally:
        supervisors[holder].signal(signal.SIGCONT)
    # Read once the first child is gone: before that, its last line may predate the
    # second child's first although it was still alive.
    spans = lifetimes(read_ledger(ledger))["lost"]
    first, second = spans[0], spans[1]
    assert first[0] == first_pid
    # Tokens grow past every token of the old master, the lost one included.
    assert second[1] > first_token > warm_token
    assert second[2] - killed_at < LOST_LEASE_TTL + 15
    for process in supervisors.values():
        assert process.process.poll() is None, pool.logs()
    return spans, killed_at


def test_guarantee_12_sentinel_failover_keeps_jobs_running_once_and_serving(
    sentinel: SentinelSetup, sentinel_pool: Pool, ledger: Path
) -> None:
    """A plain failover (the master SIGKILLed, its writes replicated): long jobs whose
    leases the new master holds go on without a restart, short ones finish, every job
    dispatched after the promotion succeeds, no supervisor exits, tokens grow."""
    pool = sentinel_pool
    supervisors = start_pair(pool)
    client = pool.client()
    warm_token = run_warm_up(client, ledger)
    long_keys = [f"long-{n}" for n in range(3)]
    for key in long_keys:
        client.dispatch(key, {"ledger": str(ledger), "seconds": 12}, handler="ledger")
    for n in range(6):
        client.dispatch(f"short-{n}", {"ledger": str(ledger), "seconds": 0.3}, handler="ledger")
    before = wait_for(lambda: all((r := job(client, k)) and r["pid"] for k in long_keys)
                      and {k: client.job(k) for k in long_keys}, 20, message="long jobs")
    wait_for(lambda: replicated(sentinel.master, sentinel.replica), 10, message="replication")
    os.kill(sentinel.master.pid, signal.SIGKILL)
    sentinel.wait_failover(sentinel.master)
    after = [f"after-{n}" for n in range(4)]
    for key in after:
        wait_for(lambda key=key: retried(lambda: client.dispatch(
            key, {"ledger": str(ledger), "seconds": 0.2}, handler="ledger")), 20,
            message="a dispatch to the new master")
    keys = [*long_keys, *(f"short-{n}" for n in range(6)), *after]
    records = wait_for(lambda: all((r := job(client, k)) and r["state"] in FINISHED
                                   for k in keys) and [client.job(k) for k in keys],
                       LOST_LEASE_TTL + 40, message="every job to finish")
    assert all(record["state"] == "succeeded" for record in records), records
    for key in long_keys:  # held by the new master: one run, never restarted
        spans = lifetimes(read_ledger(ledger))[key]
        assert [span[0] for span in spans] == [before[key]["pid"]]
    assert all(int(r["token"]) > warm_token for r in records)
    assert max(int(client.job(k)["token"]) for k in after) > max(
        int(r["token"]) for r in before.values())
    assert_one_process_at_a_time(read_ledger(ledger))
    for process in supervisors:
        assert process.process.poll() is None, pool.logs()
    status = client.status()
    assert status["store"]["master"] == f"127.0.0.1:{sentinel.replica.port}"


@pytest.fixture
def replicated_cluster() -> Iterator[RedisClusterNodes]:
    cluster = RedisClusterNodes(replicas=1, node_timeout_ms=1000).start()
    yield cluster
    cluster.remove()


def test_guarantee_12_cluster_failover_that_loses_a_claim_runs_no_job_twice(
    replicated_cluster: RedisClusterNodes, tmp_path: Path, pool_name: str, ledger: Path
) -> None:
    """The same on a Redis Cluster: the pool slot's master loses a claim and dies; its
    replica, promoted by the cluster, has another replication id, and holds claims."""
    cluster = replicated_cluster
    pool = Pool(tmp_path, cluster.url, pool_name)
    try:
        supervisors = {name: pool.start(pool.config(
            LEDGER, file=f"{name}.toml", id=name, capacity=4, lease_ttl=LOST_LEASE_TTL))
            for name in ("a", "b")}
        client = pool.client()
        warm_token = run_warm_up(client, ledger)
        master, replica = cluster.master_and_replica_of(f"poolsup:{{{pool_name}}}:token")
        holder, first_pid, first_token = lose_a_claim(pool, client, ledger, master, replica)
        supervisors[holder].signal(signal.SIGSTOP)
        os.kill(master.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        thaw(replica)
        try:
            spans = wait_for(lambda: len(lifetimes(read_ledger(ledger)).get("lost", [])) >= 2
                             and lifetimes(read_ledger(ledger))["lost"], LOST_LEASE_TTL + 25,
                             interval=0.05, message="the lost job to run again")
            wait_for(lambda: not alive(first_pid), LOST_LEASE_TTL, message="the fence")
        finally:
            supervisors[holder].signal(signal.SIGCONT)
        assert spans[0][0] == first_pid
        assert_one_process_at_a_time(read_ledger(ledger))
        assert spans[1][1] > first_token > warm_token
        assert spans[1][2] - killed_at > LOST_LEASE_TTL
        for process in supervisors.values():
            assert process.process.poll() is None, pool.logs()
    finally:
        pool.close()


# A Redis that keeps its data across a restart in place: every write is on disk before
# it is acknowledged.  Its run_id is new at every start, so a restart is a change of master.
DURABLE_REDIS = ("--appendonly", "yes", "--appendfsync", "always")
# Long enough that the frozen holder's lease, renewed just before, ends only once the
# restarted Redis is answering again (so inside the hold, not before the restart).
HOLD_LEASE_TTL = 6


@pytest.fixture
def durable_redis() -> Iterator[RedisServer]:
    server = RedisServer(args=DURABLE_REDIS).start()
    yield server
    server.remove()


def store_time(server: RedisServer) -> float:
    seconds, micros = cli(server.port, "TIME").split()
    return int(seconds) + int(micros) / 1e6


def test_guarantee_12_a_lease_that_runs_out_during_the_hold_counts_no_loss(
    durable_redis: RedisServer, tmp_path: Path, pool_name: str, ledger: Path
) -> None:
    """Redis restarted in place (its data kept, a new run_id) while a job's supervisor
    is frozen: the lease, whose renewals stopped with the holder, runs out during the
    lock-delay that the restart began.  The other supervisor recovers it once the hold
    is over and runs the job again, without counting a lease loss: the failover ended
    that lease, not the job (core/failover.py ended_by_failover, in the claim script)."""
    redis = durable_redis
    pool = Pool(tmp_path, redis.url, pool_name)
    try:
        supervisors = {name: pool.start(pool.config(
            LEDGER, file=f"{name}.toml", id=name, capacity=4, lease_ttl=HOLD_LEASE_TTL))
            for name in ("a", "b")}
        client = pool.client()
        client.dispatch("long", {"ledger": str(ledger), "seconds": 120}, handler="ledger")
        first = wait_for(lambda: (r := client.job("long"))["state"] == "running"
                         and r["pid"] and r, 20, message="the job to start")
        holder, first_pid = first["supervisor"], first["pid"]
        (other,) = set(supervisors) - {holder}
        # Frozen just after a renewal: its lease ends a whole lease_ttl later, long after
        # Redis is back.  Only its fork server's fence ends its child now.
        wait_for(lambda: client.job("long")["lease_deadline"] > first["lease_deadline"],
                 HOLD_LEASE_TTL, interval=0.01, message="a renewal")
        supervisors[holder].signal(signal.SIGSTOP)
        lease_end = client.job("long")["lease_deadline"]
        stopped_at = store_time(redis)
        redis.stop()
        redis.start()
        try:
            # The lease survived the restart and ends after it: no claim before the
            # restart recovered it, and every claim since is held until after its end.
            assert store_time(redis) < lease_end, "the lease ran out before Redis was back"
            assert stopped_at < lease_end
            wait_for(lambda: len(lifetimes(read_ledger(ledger)).get("long", [])) >= 2,
                     2 * HOLD_LEASE_TTL + 30, interval=0.05, message="the job to run again")
            wait_for(lambda: not alive(first_pid), HOLD_LEASE_TTL, message="the fence")
        finally:
            supervisors[holder].signal(signal.SIGCONT)
        assert_one_process_at_a_time(read_ledger(ledger))
        record = wait_for(lambda: (r := job(client, "long")) and r["state"] == "running"
                          and r["supervisor"] == other and r, 10, message="the second run")
        lost = [event for event in record["events"] if event["event"] == "lease_lost"]
        assert [event["supervisor"] for event in lost] == [holder], record["events"]
        assert lost[0]["detail"].startswith("not counted: the store's master changed"), lost
        assert record["lease_losses"] == 0, lost
        assert "the store's master changed" in supervisors[other].log()
        for process in supervisors.values():
            assert process.process.poll() is None, pool.logs()
    finally:
        pool.close()


@pytest.fixture
def sentinel_with_two_replicas() -> Iterator[SentinelSetup]:
    """With wait_replicas = 1, a replica must be left once another is promoted."""
    setup = SentinelSetup(replicas=2).start()
    yield setup
    setup.remove()


def member_pid(server: RedisServer, pool_name: str, supervisor_id: str) -> int | None:
    """The pid in the membership entry of `supervisor_id` as `server` holds it."""
    entry = cli(server.port, "HGET", PoolKeys(pool_name).supervisors, supervisor_id).strip()
    return int(json.loads(entry)["pid"]) if entry else None


def test_guarantee_12_a_restart_whose_registration_a_failover_loses_keeps_its_id(
    sentinel_with_two_replicas: SentinelSetup, tmp_path: Path, pool_name: str, ledger: Path
) -> None:
    """A supervisor restarted just before a failover that loses the master's last writes:
    on the new master its id is still held by the previous instance's entry.  With
    `wait_replicas = 1` its registration was never acknowledged on the old master, so it
    registers on the new one (once the previous instance's entry is stale) and serves;
    it does not take its own id for another instance's and drain (exit 1)."""
    sentinel = sentinel_with_two_replicas
    pool = Pool(tmp_path, sentinel.url, pool_name)
    try:
        config = pool.config(LEDGER, id="a", capacity=2, lease_ttl=3,
                             pool_options={"wait_replicas": 1})
        before = pool.start(config)
        master = sentinel.master
        wait_for(lambda: all(replicated(master, r) for r in sentinel.replicas), 10,
                 message="the first instance's registration to replicate")
        assert all(member_pid(r, pool_name, "a") == before.pid for r in sentinel.replicas)
        # From now on nothing the master takes reaches a replica: the first instance's
        # deregistration and the second's registration are lost in the failover.
        for replica in sentinel.replicas:
            os.kill(replica.pid, signal.SIGSTOP)
        cli(master.port, "CLIENT", "KILL", "TYPE", "replica")
        before.signal(signal.SIGTERM)
        before.wait(30)
        after = pool.start(config, serving=False)
        wait_for(lambda: member_pid(master, pool_name, "a") == after.pid, 30,
                 message="the second instance's registration on the old master")
        os.kill(master.pid, signal.SIGKILL)
        for replica in sentinel.replicas:
            thaw(replica)
        new_master = sentinel.wait_failover(master)
        assert member_pid(new_master, pool_name, "a") == before.pid  # the writes were lost
        client = pool.client()
        wait_for(lambda: retried(lambda: client.dispatch(
            "after", {"ledger": str(ledger), "seconds": 0.2}, handler="ledger")), 20,
            message="a dispatch to the new master")
        # A job starts on the new master only after the lock-delay (lease_ttl + 1 s); by
        # then the second instance's renewals (every lease_ttl / 3, each answering whether
        # the entry is its own) have found its id taken or not: taken, it drains, exit 1.
        wait_for(lambda: after.process.poll() is not None
                 or ((r := job(client, "after")) and r["state"] in FINISHED), 60,
                 message="the job to run on the new master, or the supervisor to exit")
        assert after.process.poll() is None, pool.logs()
        record = client.job("after")
        assert record["state"] == "succeeded" and record["supervisor"] == "a", record
        assert "taken by another instance" not in after.log()
        (listed,) = [s for s in client.status()["supervisors"] if s["id"] == "a"]
        assert listed["pid"] == after.pid and listed["state"] == "running", listed
    finally:
        pool.close()
