"""The contract's guarantees, each against real supervisors, children and Redis."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers.pool import (
    assert_one_process_at_a_time,
    lifetimes,
    read_ledger,
    wait_for,
)
from tests.integration.conftest import Pool

LEDGER = {"ledger": {"path": "ledger.py", "timeout": 0, "max_attempts": 3}}


def running_pids(client, keys):  # type: ignore[no-untyped-def]
    records = [client.job(key) for key in keys]
    if all(r["state"] == "running" and r["pid"] for r in records):
        return {r["key"]: (r["pid"], r["token"], r["supervisor"]) for r in records}
    return None


def all_finished(client, keys):  # type: ignore[no-untyped-def]
    records = [client.job(key) for key in keys]
    if all(r["state"] in ("succeeded", "failed", "stopped") for r in records):
        return records
    return None


def test_guarantee_1_cpu_bound_handlers_on_every_core_keep_their_leases(
    pool: Pool, ledger: Path
) -> None:
    lease_ttl = 2
    busy_children = psutil.cpu_count() * 2
    config = pool.config(LEDGER, capacity=busy_children, lease_ttl=lease_ttl, id="busy")
    supervisor = pool.start(config)
    client = pool.client()
    keys = [f"cpu-{i}" for i in range(busy_children)]
    for key in keys:
        client.dispatch(
            key, {"ledger": str(ledger), "seconds": 3 * lease_ttl, "busy": True}, handler="ledger"
        )
    records = wait_for(lambda: all_finished(client, keys), 60, message="jobs to finish")
    for record in records:
        assert record["state"] == "succeeded", record
        assert record["attempts"] == 1, record
        assert record["lease_losses"] == 0, record
    assert "lease lost" not in supervisor.log()
    assert_one_process_at_a_time(read_ledger(ledger))


def is_gone(pid: int) -> bool:
    """Exited or a zombie; a process that ends while it is looked at is gone too."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_guarantee_4_failover_after_sigkill(pool: Pool, ledger: Path) -> None:
    lease_ttl = 2
    first = pool.start(pool.config(LEDGER, file="a.toml", id="a", capacity=2, lease_ttl=lease_ttl))
    client = pool.client()
    keys = ["fo-1", "fo-2"]
    for key in keys:
        client.dispatch(key, {"ledger": str(ledger), "seconds": 6}, handler="ledger")
    before = wait_for(lambda: running_pids(client, keys), 20, message="jobs to run on a")
    assert {owner for _, _, owner in before.values()} == {"a"}
    pool.start(pool.config(LEDGER, file="b.toml", id="b", capacity=2, lease_ttl=lease_ttl))

    first.process.kill()
    killed_at = time.monotonic()
    for pid, _, _ in before.values():
        wait_for(
            lambda pid=pid: is_gone(pid),
            5,
            message=f"child {pid} to die",
        )
    children_dead_after = time.monotonic() - killed_at
    assert children_dead_after < 1.0, f"children outlived the supervisor by {children_dead_after}"

    def taken_over():  # type: ignore[no-untyped-def]
        spans = lifetimes(read_ledger(ledger))
        return all(len(spans.get(key, [])) >= 2 for key in keys) and spans

    spans = wait_for(taken_over, lease_ttl + 10, interval=0.02, message="failover")
    for key in keys:
        old_pid, old_token, _ = before[key]
        new_pid, new_token, first_seen, _ = spans[key][1]
        assert new_token > old_token
        assert new_pid != old_pid
        # the ledger's monotonic stamps share the test's clock
        assert first_seen - killed_at < lease_ttl + 2, (
            f"{key} restarted after {first_seen - killed_at:.2f} s"
        )
    records = wait_for(lambda: all_finished(client, keys), 30, message="jobs to finish")
    for record in records:
        assert record["state"] == "succeeded"
        assert record["supervisor"] == "b"
    assert_one_process_at_a_time(read_ledger(ledger))


# Also with max_jobs_per_child = 100, on Redis alone to keep the suite within its time.
@pytest.mark.parametrize(
    ("store_url", "jobs_per_child"), [("redis", 1), ("sqlite", 1), ("redis", 100)],
    indirect=["store_url"],
)
def test_guarantee_1_frozen_supervisor_never_runs_twice(
    pool: Pool, ledger: Path, jobs_per_child: int
) -> None:
    lease_ttl = 2
    handlers = {"ledger": {**LEDGER["ledger"], "max_jobs_per_child": jobs_per_child}}
    frozen = pool.start(pool.config(handlers, file="a.toml", id="a", capacity=2,
                                    lease_ttl=lease_ttl))
    client = pool.client()
    keys = ["fz-1", "fz-2"]
    for key in keys:
        client.dispatch(key, {"ledger": str(ledger), "seconds": 4}, handler="ledger")
    before = wait_for(lambda: running_pids(client, keys), 20, message="jobs to run on a")
    pool.start(pool.config(handlers, file="b.toml", id="b", capacity=2, lease_ttl=lease_ttl))

    frozen.signal(signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:

        def owned_by_b():  # type: ignore[no-untyped-def]
            return all(client.job(key)["supervisor"] == "b" for key in keys)

        wait_for(owned_by_b, lease_ttl + 10, message="b to take the jobs over")
        time.sleep(max(0.0, frozen_at + 3 * lease_ttl - time.monotonic()))
    finally:
        frozen.signal(signal.SIGCONT)
    records = wait_for(lambda: all_finished(client, keys), 30, message="jobs to finish")
    time.sleep(1.0)  # give the thawed supervisor time to (wrongly) write anything
    for key, record in zip(keys, [client.job(key) for key in keys], strict=True):
        assert record["state"] == "succeeded"
        assert record["supervisor"] == "b"
        assert record["token"] > before[key][1]
        assert record["result"]["token"] == record["token"]
        assert record["result"]["pid"] != before[key][0]
    assert records
    assert_one_process_at_a_time(read_ledger(ledger))
    assert "succeeded" not in "\n".join(
        line for line in frozen.log().splitlines() if "fz-" in line
    ), "the frozen supervisor stored an outcome for a job it no longer owned"


def lease_ends(client, keys):  # type: ignore[no-untyped-def]
    """Each job's lease deadline as the store holds it, on this host's monotonic clock
    (the ledger's): Redis counts leases on its own clock, the same host's here."""
    offset = time.time() - time.monotonic()
    return {key: client.job(key)["lease_deadline"] - offset for key in keys}


def test_guarantee_1_store_unreachable_kills_children_before_leases_expire(
    tmp_path: Path,
    own_redis,
    pool_name: str,  # type: ignore[no-untyped-def]
) -> None:
    # A TTL where the fence margin is at its cap (1 s) and below TTL/4: a fence moved
    # later by TTL/4 lets the children outlive their leases, and this test sees it.
    lease_ttl = 6
    ledger = tmp_path / "ledger.txt"
    pool = Pool(tmp_path, own_redis.url, pool_name)
    try:
        pool.start(pool.config(LEDGER, id="a", capacity=2, lease_ttl=lease_ttl))
        client = pool.client()
        keys = ["un-1", "un-2"]
        for key in keys:
            client.dispatch(key, {"ledger": str(ledger), "seconds": 12}, handler="ledger")
        before = wait_for(lambda: running_pids(client, keys), 20, message="jobs to run")
        # Freeze the store just after a renewal, read back exactly: the deadlines it
        # then holds are the real ends of the leases (the next renewal is TTL/3 away).
        first = lease_ends(client, keys)
        ends = wait_for(
            lambda: (ends := lease_ends(client, keys))
            and all(ends[key] > first[key] for key in keys) and ends,
            lease_ttl, interval=0.002, message="a renewal",
        )
        own_redis.pause()
        try:
            for pid, _, _ in before.values():
                wait_for(
                    lambda pid=pid: not psutil.pid_exists(pid),
                    lease_ttl + 2,
                    message=f"child {pid} to be fenced",
                )
            last_seen = {
                span[0]: span[3]
                for spans in lifetimes(read_ledger(ledger)).values()
                for span in spans
            }
            for key, (pid, _, _) in before.items():
                assert last_seen[pid] < ends[key], (
                    f"{key}: the child was alive {last_seen[pid] - ends[key]:.3f} s after "
                    "its lease ended")
            time.sleep(max(0.0, max(ends.values()) + 0.5 - time.monotonic()))
        finally:
            own_redis.resume()
        records = wait_for(lambda: all_finished(client, keys), 60, message="jobs to finish")
        for record in records:
            assert record["state"] == "succeeded", record
            assert record["result"]["pid"] != before[record["key"]][0]
        assert_one_process_at_a_time(read_ledger(ledger))
    finally:
        pool.close()


def test_concurrent_supervisors_run_each_job_once(pool: Pool, ledger: Path) -> None:
    for index in range(3):
        pool.start(pool.config(LEDGER, file=f"s{index}.toml", id=f"s{index}", capacity=4))
    client = pool.client()
    keys = [f"many-{i}" for i in range(60)]
    for key in keys:
        client.dispatch(key, {"ledger": str(ledger), "seconds": 0.05}, handler="ledger")
    records = wait_for(lambda: all_finished(client, keys), 60, message="jobs to finish")
    assert all(r["state"] == "succeeded" and r["attempts"] == 1 for r in records)
    spans = lifetimes(read_ledger(ledger))
    assert all(len(spans[key]) == 1 for key in keys), "a job ran in more than one process"
    assert len({r["supervisor"] for r in records}) >= 2
