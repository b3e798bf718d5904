"""Wake-ups on Redis, with real supervisors: a job made claimable wakes one supervisor,
not the pool, and a wake-up lost on a frozen supervisor costs the job one poll."""

from __future__ import annotations

import hashlib
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from supervisor.store.redis.keys import PoolKeys
from supervisor.store.redis.scripts import commands
from tests.helpers.pool import wait_for
from tests.integration.conftest import Pool

ECHO = {"echo": {"path": "basic.py", "function": "echo"}}
SUPERVISORS = 4


@pytest.fixture
def redis_pool(tmp_path: Path, redis_url: str, pool_name: str) -> Iterator[Pool]:
    pool = Pool(tmp_path, redis_url, pool_name)
    yield pool
    pool.close()


class ClaimCounter:
    """Counts the claim scripts Redis runs, from MONITOR, on a thread of its own."""

    def __init__(self, url: str) -> None:
        self._sha = hashlib.sha1(commands()["claim"].source.encode()).hexdigest()
        self._client = redis.Redis.from_url(url)
        self._monitor = self._client.monitor()
        self._monitor.connection.send_command("MONITOR")
        self._monitor.connection.read_response()  # OK: every command after this is seen
        self.count = 0
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        prefix = f"EVALSHA {self._sha}".lower()
        try:
            for entry in self._monitor.listen():
                if entry["command"].lower().startswith(prefix):
                    self.count += 1
        except (redis.ConnectionError, ValueError, OSError):
            return

    def close(self) -> None:
        self._monitor.connection.disconnect()
        self._client.close()


def idle_supervisors(pool: Pool, count: int) -> None:
    """Start `count` supervisors and wait until each waits for work."""
    for index in range(count):
        pool.start(pool.config(ECHO, file=f"s{index}.toml", id=f"s{index}", capacity=2))
    keys = PoolKeys(pool.name)
    with redis.Redis.from_url(pool.store) as admin:
        wait_for(lambda: admin.scard(keys.waiting("echo")) == count, 20,
                 message="every supervisor to wait for work")


def test_a_dispatch_into_idle_supervisors_wakes_one_claim_not_all(redis_pool: Pool) -> None:
    idle_supervisors(redis_pool, SUPERVISORS)
    client = redis_pool.client()
    counter = ClaimCounter(redis_pool.store)
    try:
        time.sleep(0.2)
        began, idle_claims = time.monotonic(), counter.count
        time.sleep(3.0)  # the idle pool's polls, to subtract
        poll_rate = (counter.count - idle_claims) / (time.monotonic() - began)
        jobs = [f"w-{n}" for n in range(12)]
        began, before = time.monotonic(), counter.count
        for key in jobs:
            client.dispatch(key, {}, handler="echo")
            wait_for(lambda key=key: client.job(key)["state"] == "succeeded", 20,
                     interval=0.01, message=f"{key} to succeed")
        claims = counter.count - before - poll_rate * (time.monotonic() - began)
    finally:
        counter.close()
    # Each job: the claim of the supervisor woken for it, and the one that stores its
    # result.  Every idle supervisor claiming for each dispatch would be 4 + 1.
    assert claims / len(jobs) < 3.0, (claims, poll_rate)


def test_a_wake_up_lost_on_a_frozen_supervisor_costs_the_job_one_poll(
    redis_pool: Pool
) -> None:
    idle_supervisors(redis_pool, 2)
    frozen = redis_pool.supervisors[0]
    client = redis_pool.client()
    frozen.signal(signal.SIGSTOP)
    try:
        waits = []
        for n in range(8):  # about half of the wake-ups go to the frozen one
            key = f"f-{n}"
            dispatched = time.monotonic()
            client.dispatch(key, {}, handler="echo")
            wait_for(lambda key=key: client.job(key)["state"] == "succeeded", 20,
                     interval=0.01, message=f"{key} to succeed")
            waits.append(time.monotonic() - dispatched)
            assert client.job(key)["supervisor"] == "s1"
    finally:
        frozen.signal(signal.SIGCONT)
    # The poll is 0.5 s; generous for a loaded machine, far below a lease or a stranding.
    assert max(waits) < 3.0, waits


MOVABLE = {"movable": {"path": "movable.py", "timeout": 0, "max_attempts": 3,
                       "rebalance": True}}
LONG_TTL = 30  # renewals every 10 s: a note or a stop within a few seconds came by doorbell


def events_of(path: Path, kind: str, key: str) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines()
            if line.startswith(f"{kind} {key} ")]


def test_stop_and_notify_reach_the_holder_after_a_move(
    redis_pool: Pool, ledger: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.txt"
    first = redis_pool.start(redis_pool.config(
        MOVABLE, file="a.toml", id="a", capacity=1, lease_ttl=LONG_TTL, drain_timeout=0.5,
        stop_grace=2))
    client = redis_pool.client()
    client.dispatch("m", {"ledger": str(ledger), "events": str(events)}, handler="movable")
    wait_for(lambda: events_of(events, "start", "m"), 20, message="the job to start on a")
    redis_pool.start(redis_pool.config(MOVABLE, file="b.toml", id="b", capacity=1,
                                       lease_ttl=LONG_TTL))

    first.signal(signal.SIGTERM)  # the drain hands the job over to b
    assert first.wait(30) == 0, first.log()
    record = wait_for(lambda: (r := client.job("m"))["supervisor"] == "b"
                      and r["state"] == "running" and len(events_of(events, "start", "m")) == 2
                      and r, 20, message="the job to run on b")
    token = str(record["token"])

    client.notify("m", {"hello": "b"})
    notes = wait_for(lambda: events_of(events, "note", "m"), 3, interval=0.02,
                     message="the note to reach b by its doorbell")
    client.stop("m", wait=False)
    stops = wait_for(lambda: [e for e in events_of(events, "stop", "m") if e[2] == token], 3,
                     interval=0.02, message="the stop to reach b by its doorbell")

    assert notes[0][2] == token
    assert stops[0][3] == "stop"
