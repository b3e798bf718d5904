"""Guarantee 12 on PostgreSQL: a standby promoted without the last commits of its primary
never runs a job twice at once; tokens keep growing across the change; a standby takes
no claim.

Real servers (a primary and a streaming standby, pg_basebackup), real supervisors and
children.  The lost commit is made for real: the standby is frozen and its WAL sender
ended while the primary commits a claim, then the primary is stopped with `-m immediate`
and the standby, thawed, is promoted without it.  The supervisors' URL names both hosts
with `target_session_attrs=read-write`, so they follow the promotion on their own.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from supervisor import Client
from supervisor.errors import StoreFailure
from supervisor.store import opened_store
from tests.helpers.pool import (
    FINISHED,
    assert_one_process_at_a_time,
    lifetimes,
    read_ledger,
    wait_for,
)
from tests.helpers.postgres_server import PostgresServer
from tests.integration.conftest import Pool

LEDGER = {"ledger": {"path": "ledger.py", "timeout": 0, "max_attempts": 3}}
LOST_LEASE_TTL = 15


@pytest.fixture
def primary() -> Iterator[PostgresServer]:
    # Commits are in the WAL when they return (so they reach the standby unless it is
    # cut off); the standby gets them asynchronously.
    server = PostgresServer(settings={"wal_level": "replica", "synchronous_commit": "on"}).start()
    yield server
    server.remove()


@pytest.fixture
def standby(primary: PostgresServer) -> Iterator[PostgresServer]:
    server = PostgresServer(primary=primary).start()
    yield server
    server.remove()


def both_url(primary: PostgresServer, standby: PostgresServer) -> str:
    return (f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/pool"
            "?target_session_attrs=read-write")


def retried(call: Any) -> Any:
    try:
        return call()
    except StoreFailure:
        return None


def server_processes(server: PostgresServer) -> list[psutil.Process]:
    postmaster = psutil.Process(int((server.data / "postmaster.pid").read_text().split()[0]))
    return [postmaster, *postmaster.children(recursive=True)]


def replayed(primary: PostgresServer, standby: PostgresServer) -> bool:
    """The standby has replayed everything the primary wrote so far."""
    lsn = primary.psql("SELECT pg_current_wal_insert_lsn()")
    return standby.psql(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn") == "t"


def alive(pid: int) -> bool:
    return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


@pytest.mark.anyio
async def test_a_standby_takes_no_claim(primary: PostgresServer, standby: PostgresServer,
                                        pool_name: str) -> None:
    async with opened_store(primary.url, pool_name) as store:
        await store.pause([])  # the schema exists, and replicates
        await store.resume([])
    wait_for(lambda: replayed(primary, standby), 10, message="the standby to catch up")
    async with opened_store(standby.url, pool_name) as store:
        with pytest.raises(StoreFailure, match="read-only standby"):
            await store.claim("s", ["h"], 1, 5.0, 3)
        assert (await store.counts())["pending"] == 0  # reads still work


def test_guarantee_12_a_promotion_that_loses_a_claim_runs_no_job_twice(
    tmp_path: Path, primary: PostgresServer, standby: PostgresServer, pool_name: str,
    ledger: Path,
) -> None:
    pool = Pool(tmp_path, both_url(primary, standby), pool_name)
    try:
        supervisors = {name: pool.start(pool.config(
            LEDGER, file=f"{name}.toml", id=name, capacity=4, lease_ttl=LOST_LEASE_TTL))
            for name in ("a", "b")}
        client = pool.client()
        client.dispatch("warm-up", {"ledger": str(ledger), "seconds": 0.05}, handler="ledger")
        warm = wait_for(lambda: (r := retried(lambda: client.job("warm-up")))
                        and r["state"] in FINISHED and r, 30, message="the warm-up job")
        assert warm["state"] == "succeeded"

        # A job dispatched and replicated, then claimed once the standby is cut off.
        client.dispatch("lost", {"ledger": str(ledger), "seconds": 40}, handler="ledger",
                        run_at=time.time() + 3)
        wait_for(lambda: replayed(primary, standby), 10, message="the dispatch to replicate")
        frozen = server_processes(standby)
        for process in frozen:
            with contextlib.suppress(psutil.NoSuchProcess):  # a backend that just ended
                process.send_signal(signal.SIGSTOP)
        # Ended, and waited for: nothing more of the primary's WAL reaches the standby.
        primary.psql("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_replication")
        record = wait_for(lambda: (r := client.job("lost"))["state"] == "running"
                          and r["pid"] and r, 15, message="the job to start on the primary")
        holder, first_pid, first_token = record["supervisor"], record["pid"], record["token"]

        # The holder is frozen: only its fork server's fence ends its child now.
        supervisors[holder].signal(signal.SIGSTOP)
        primary.stop("immediate")
        stopped_at = time.monotonic()
        for process in frozen:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGCONT)
        standby.promote()
        # The new primary lacks the claim: the job is pending there while its child runs.
        assert standby.psql(f"SELECT state FROM poolsup.jobs WHERE pool = '{pool_name}' "
                            "AND key = 'lost'") == "pending"
        try:
            wait_for(lambda: len(lifetimes(read_ledger(ledger)).get("lost", [])) >= 2,
                     LOST_LEASE_TTL + 30, interval=0.05, message="the lost job to run again")
            wait_for(lambda: not alive(first_pid), LOST_LEASE_TTL, message="the fence")
        finally:
            supervisors[holder].signal(signal.SIGCONT)
        spans = lifetimes(read_ledger(ledger))["lost"]
        assert spans[0][0] == first_pid
        assert_one_process_at_a_time(read_ledger(ledger))
        # Tokens grow past every token of the old primary, the lost one included.
        assert spans[1][1] > first_token > warm["token"]
        # Held back for the longest lease after the change was seen.
        assert spans[1][2] - stopped_at > LOST_LEASE_TTL
        for process in supervisors.values():
            assert process.process.poll() is None, pool.logs()
    finally:
        pool.close()


def test_the_cli_names_a_server_it_cannot_reach_in_one_line(
    tmp_path: Path, pool_name: str
) -> None:
    from tests.helpers.redis_server import free_port

    url = f"postgresql://poolsup:hunter2@127.0.0.1:{free_port()}/pool"
    client = Client(url, pool=pool_name)
    try:
        with pytest.raises(StoreFailure) as caught:
            client.status()
    finally:
        client.close()
    message = caught.value.message
    assert "\n" not in message and "hunter2" not in message
    assert message.startswith("postgresql at postgresql://poolsup:***@127.0.0.1:"), message
