"""Steering a pool of real supervisors (guarantee 10): pool-wide limits and rates held
across supervisors, also while one is SIGKILLed; priorities behind a backlog; pauses
that stop every supervisor's starts and survive a restart."""

from __future__ import annotations

import itertools
import signal
import time
from pathlib import Path
from typing import Any

from supervisor import Client
from tests.helpers.pool import lifetimes, read_ledger, wait_for
from tests.integration.conftest import Pool

ECHO = {"path": "basic.py", "function": "echo", "timeout": 60}


def ledger_handler(**limits: Any) -> dict[str, dict[str, Any]]:
    return {"ledger": {"path": "ledger.py", "timeout": 60, "max_attempts": 5, **limits}}


def most_alive_at_once(ledger: Path, keys: set[str] | None = None) -> int:
    """The most processes the ledger saw alive at one time (of `keys`, if given)."""
    spans = [(first, last) for key, runs in lifetimes(read_ledger(ledger)).items()
             if keys is None or key in keys for _pid, _token, first, last in runs]
    return max((sum(1 for first, last in spans if first <= at <= last)
                for at, _ in spans), default=0)


def all_succeeded(client: Any, keys: list[str]) -> bool:
    return all(client.job(key)["state"] == "succeeded" for key in keys)


def test_max_running_holds_across_supervisors_and_a_sigkill(pool: Pool, ledger: Path) -> None:
    handlers = ledger_handler(max_running=2)
    members = [pool.start(pool.config(handlers, file=f"{name}.toml", id=name, capacity=2,
                                      lease_ttl=2))
               for name in ("a", "b", "c")]
    client = pool.client()
    keys = [f"j{n}" for n in range(8)]
    for key in keys:
        client.dispatch(key, {"ledger": str(ledger), "seconds": 1.0}, handler="ledger")
    wait_for(lambda: client.status()["counts"]["running"] == 2, 20, message="two running")
    members[0].process.kill()

    wait_for(lambda: all_succeeded(client, keys), 90, message="every job to succeed")
    assert most_alive_at_once(ledger) == 2, pool.logs()
    assert len({line.key for line in read_ledger(ledger)}) == len(keys)


def test_max_running_per_group_limits_each_group(pool: Pool, ledger: Path) -> None:
    pool.start(pool.config(ledger_handler(max_running_per_group=1), capacity=6))
    client = pool.client()
    groups = {"tenant-a": [f"a{n}" for n in range(3)], "tenant-b": [f"b{n}" for n in range(3)]}
    for group, keys in groups.items():
        for key in keys:
            client.dispatch(key, {"ledger": str(ledger), "seconds": 0.5}, handler="ledger",
                            group=group)

    every = [key for keys in groups.values() for key in keys]
    wait_for(lambda: all_succeeded(client, every), 60, message="every job to succeed")
    for keys in groups.values():
        assert most_alive_at_once(ledger, set(keys)) == 1
    assert most_alive_at_once(ledger) == 2


def test_a_rate_limit_holds_in_every_second(pool: Pool) -> None:
    for name in ("a", "b"):
        config = pool.config({"echo": {**ECHO, "rate_limit": "5/s"}}, file=f"{name}.toml",
                             id=name, capacity=4)
        pool.start(config)
    client = pool.client()
    keys = [f"r{n}" for n in range(30)]
    for key in keys:
        client.dispatch(key, {}, handler="echo")
    with Client.from_config(config) as configured:
        limited = wait_for(lambda: configured.status()["limits"]["echo"]["at_limit"]
                           and configured.status()["limits"]["echo"], 10,
                           message="status to say the rate holds jobs back")
    assert limited["rate_limit"] == "5/s" and limited["starts_in_period"] == 5

    wait_for(lambda: all_succeeded(client, keys), 60, message="every job to succeed")
    starts = sorted(client.job(key)["started_at"] for key in keys)
    for first, sixth in zip(starts, starts[5:], strict=False):
        assert sixth - first >= 1.0 - 1e-3, starts
    assert starts[-1] - starts[0] >= 5.0 - 1e-3


def test_a_high_priority_job_starts_first_behind_a_backlog(pool: Pool) -> None:
    pool.start(pool.config({"echo": ECHO}, capacity=1))
    client = pool.client()
    client.pause()
    backlog = [f"low-{n}" for n in range(1000)]
    for key in backlog:
        client.dispatch(key, {}, handler="echo")
    client.dispatch("urgent", {}, handler="echo", priority=9)
    client.resume()

    wait_for(lambda: client.job("urgent")["state"] == "succeeded", 30,
             message="the urgent job to run")
    started = [record["started_at"] for record in client.jobs("succeeded")
               if record["key"] != "urgent"]
    assert all(client.job("urgent")["started_at"] < at for at in started)


def test_pause_stops_every_supervisor_and_survives_a_restart(pool: Pool) -> None:
    handlers = {"echo": ECHO}
    pool.start(pool.config(handlers, file="a.toml", id="a"))
    second = pool.start(pool.config(handlers, file="b.toml", id="b"))
    client = pool.client()
    client.dispatch("before", {}, handler="echo")
    wait_for(lambda: client.job("before")["state"] == "succeeded", 20, message="a first job")

    client.pause(["echo"])
    paused_at = time.time()
    keys = [f"p{n}" for n in range(6)]
    for key in keys:
        client.dispatch(key, {}, handler="echo")
    assert client.status()["paused"] == {"pool": False, "handlers": ["echo"]}
    second.signal(signal.SIGTERM)
    assert second.wait(30) == 0
    pool.start(pool.config(handlers, file="b.toml", id="b"))
    time.sleep(2.0)
    assert [client.job(key)["state"] for key in keys] == ["pending"] * len(keys)

    client.resume(["echo"])
    wait_for(lambda: all_succeeded(client, keys), 30, message="the jobs after resume")
    assert all(client.job(key)["started_at"] > paused_at for key in keys)
    assert client.status()["paused"] == {"pool": False, "handlers": []}


def test_jobs_started_after_a_pause_returned_are_none(pool: Pool) -> None:
    pool.start(pool.config({"echo": ECHO}, capacity=4))
    client = pool.client()
    keys = [f"s{n}" for n in range(200)]
    paused_at = None
    for index, key in enumerate(keys):
        client.dispatch(key, {}, handler="echo")
        if index == 50:
            client.pause()
            paused_at = client.status()["store_time"]
    assert paused_at is not None
    time.sleep(1.5)

    started = [record["started_at"] for record in client.jobs()
               if record["started_at"] is not None]
    assert started and max(started) <= paused_at
    assert list(itertools.islice((r for r in client.jobs("pending")), 1))
