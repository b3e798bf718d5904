"""Guarantee 1 when the supervisor's whole process group is frozen (Ctrl-Z, or
`kill -STOP -PGID`): the fork server is not in that group, so it still fences."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tests.helpers.pool import assert_one_process_at_a_time, read_ledger, wait_for
from tests.integration.conftest import Pool

LEDGER = {"ledger": {"path": "ledger.py", "timeout": 0, "max_attempts": 3}}


def test_guarantee_1_frozen_process_group_never_runs_twice(pool: Pool, ledger: Path) -> None:
    lease_ttl = 2
    frozen = pool.start(
        pool.config(LEDGER, file="a.toml", id="a", capacity=1, lease_ttl=lease_ttl),
        new_session=True,
    )
    client = pool.client()
    client.dispatch("pg-1", {"ledger": str(ledger), "seconds": 8}, handler="ledger")
    first = wait_for(
        lambda: (record := client.job("pg-1"))["state"] == "running" and record["pid"] and record,
        20, message="the job to run on a",
    )
    assert first["supervisor"] == "a"
    pool.start(pool.config(LEDGER, file="b.toml", id="b", capacity=1, lease_ttl=lease_ttl))

    os.killpg(frozen.pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        wait_for(lambda: client.job("pg-1")["supervisor"] == "b", lease_ttl + 10,
                 message="b to take the job over")
        time.sleep(max(0.0, frozen_at + 3 * lease_ttl - time.monotonic()))
    finally:
        os.killpg(frozen.pid, signal.SIGCONT)
    record = wait_for(
        lambda: (record := client.job("pg-1"))["state"] in ("succeeded", "failed") and record,
        30, message="the job to finish",
    )
    assert record["state"] == "succeeded", record
    assert record["supervisor"] == "b"
    assert record["token"] > first["token"]
    assert_one_process_at_a_time(read_ledger(ledger))
