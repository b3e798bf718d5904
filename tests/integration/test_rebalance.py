"""Rebalance (guarantee 7): when a supervisor joins, rebalanceable jobs move until each
member runs its capacity-weighted share, each move stopping the old child before the new
one starts and spending no attempt; a stop or a note sent during a move is not lost."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.pool import assert_one_process_at_a_time, read_ledger, wait_for
from tests.integration.conftest import Pool

MOVABLE = {"movable": {"path": "movable.py", "timeout": 0, "max_attempts": 3}}
# The longest runs use Redis alone, to keep the suite within its time; the planner and
# the moves are the same code on every store, and the others run on Redis and SQLite
# (those of ON_POSTGRES, conftest.py, on PostgreSQL too).
redis_only = pytest.mark.parametrize("store_url", ["redis"], indirect=True)


def split(client: Any, keys: list[str]) -> Counter[str]:
    """Running jobs (with a started child) per supervisor."""
    records = [client.job(key) for key in keys]
    return Counter(r["supervisor"] for r in records if r["state"] == "running" and r["pid"])


def dispatch(client: Any, keys: list[str], tmp_path: Path, **extra: Any) -> None:
    for key in keys:
        client.dispatch(key, {"ledger": str(tmp_path / "ledger.txt"),
                              "events": str(tmp_path / "events.txt"), **extra},
                        handler="movable")


def events(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "events.txt"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def stays(predicate: Any, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert predicate()
        time.sleep(0.25)


def test_guarantee_7_a_joiner_takes_half_of_four_long_running_jobs(
    pool: Pool, tmp_path: Path
) -> None:
    pool.start(pool.config(MOVABLE, file="a.toml", id="a", capacity=4, lease_ttl=2))
    client = pool.client()
    keys = [f"long-{i}" for i in range(4)]
    dispatch(client, keys, tmp_path)
    wait_for(lambda: split(client, keys) == {"a": 4}, 20, message="4 jobs on a")
    wait_for(lambda: all(client.job(key)["checkpoint"] for key in keys), 20,
             message="checkpoints")
    before = {key: client.job(key)["token"] for key in keys}

    joined = time.monotonic()
    pool.start(pool.config(MOVABLE, file="b.toml", id="b", capacity=4, lease_ttl=2))
    wait_for(lambda: split(client, keys) == {"a": 2, "b": 2}, 40, message="a 2 + 2 split")
    print(f"\njoin to a converged 2 + 2 split: {time.monotonic() - joined:.2f} s")

    stays(lambda: split(client, keys) == {"a": 2, "b": 2}, 3 * 2)  # several lease periods
    records = {key: client.job(key) for key in keys}
    moved = [key for key in keys if records[key]["token"] != before[key]]
    assert len(moved) == 2, records
    for record in records.values():
        assert record["attempts"] == 1, record
    starts = {(key, int(token)): int(count) for kind, key, token, count in events(tmp_path)
              if kind == "start"}
    for key in moved:
        assert starts[(key, records[key]["token"])] > 0, "a moved job resumes from its checkpoint"
    stops = [line for line in events(tmp_path) if line[0] == "stop"]
    assert sorted((key, why) for _, key, _, why in stops) == [(key, "rebalance")
                                                              for key in sorted(moved)]
    assert_one_process_at_a_time(read_ledger(tmp_path / "ledger.txt"))
    status = client.status()
    assert {s["id"]: s["share"] for s in status["supervisors"]} == {"a": 2, "b": 2}


@redis_only
def test_guarantee_7_the_split_follows_capacity(pool: Pool, tmp_path: Path) -> None:
    pool.start(pool.config(MOVABLE, file="a.toml", id="a", capacity=4, lease_ttl=2))
    client = pool.client()
    keys = [f"long-{i}" for i in range(3)]
    dispatch(client, keys, tmp_path)
    wait_for(lambda: split(client, keys) == {"a": 3}, 20, message="3 jobs on a")
    pool.start(pool.config(MOVABLE, file="b.toml", id="b", capacity=2, lease_ttl=2))
    wait_for(lambda: split(client, keys) == {"a": 2, "b": 1}, 40, message="a 2 + 1 split")
    stays(lambda: split(client, keys) == {"a": 2, "b": 1}, 2 * 2)
    assert all(client.job(key)["attempts"] == 1 for key in keys)
    assert_one_process_at_a_time(read_ledger(tmp_path / "ledger.txt"))


def test_guarantee_7_a_stop_and_notes_sent_during_a_move_are_not_lost(
    pool: Pool, tmp_path: Path
) -> None:
    pool.start(pool.config(MOVABLE, file="a.toml", id="a", capacity=4, lease_ttl=2,
                           stop_grace=10))
    client = pool.client()
    keys = [f"long-{i}" for i in range(4)]
    dispatch(client, keys, tmp_path, linger=2.0)
    wait_for(lambda: split(client, keys) == {"a": 4}, 20, message="4 jobs on a")
    pool.start(pool.config(MOVABLE, file="b.toml", id="b", capacity=4, lease_ttl=2))

    def moving() -> list[str]:
        return [key for kind, key, _, why in (e for e in events(tmp_path) if e[0] == "stop")
                if kind == "stop" and why == "rebalance"]

    wait_for(lambda: len(moving()) == 2, 40, message="two moves to start")
    stopped_key, noted_key = moving()
    client.notify(noted_key, "n1")
    client.stop(stopped_key, wait=False)
    client.notify(noted_key, "n2")

    wait_for(lambda: client.job(stopped_key)["state"] == "stopped", 20, message="the stop")
    record = wait_for(lambda: (r := client.job(noted_key))["supervisor"] == "b"
                      and r["state"] == "running" and r, 20, message="the moved job on b")
    wait_for(lambda: [e[3] for e in events(tmp_path) if e[0] == "note" and e[1] == noted_key]
             == ["n1", "n2"], 20, message="both notes, in order, in the run on b")
    notes = [e for e in events(tmp_path) if e[0] == "note" and e[1] == noted_key]
    assert all(int(token) == record["token"] for _, _, token, _ in notes)
    assert record["attempts"] == 1
    # Nothing of the stopped job ran after the stop, and never twice at once.
    assert not [e for e in events(tmp_path) if e[0] == "start" and e[1] == stopped_key
                and int(e[2]) != client.job(stopped_key)["token"]]
    assert_one_process_at_a_time(read_ledger(tmp_path / "ledger.txt"))


@redis_only
def test_guarantee_7_a_killed_supervisors_jobs_run_once_elsewhere_then_rebalance(
    pool: Pool, tmp_path: Path
) -> None:
    configs = {name: pool.config(MOVABLE, file=f"{name}.toml", id=name, capacity=4,
                                 lease_ttl=2)
               for name in ("a", "b", "c")}
    first = pool.start(configs["a"])
    client = pool.client()
    keys = [f"long-{i}" for i in range(6)]
    dispatch(client, keys, tmp_path)
    wait_for(lambda: split(client, keys) == {"a": 4}, 20, message="4 jobs on a")
    pool.start(configs["b"])
    pool.start(configs["c"])
    wait_for(lambda: split(client, keys) == {"a": 2, "b": 2, "c": 2}, 60,
             message="a 2 + 2 + 2 split")

    killed = time.monotonic()
    first.kill()
    wait_for(lambda: split(client, keys) == {"b": 3, "c": 3}, 30, message="a's jobs on b, c")
    print(f"\nSIGKILL to its jobs running elsewhere: {time.monotonic() - killed:.2f} s")
    pool.start(configs["a"])
    wait_for(lambda: split(client, keys) == {"a": 2, "b": 2, "c": 2}, 60,
             message="a restarted with its id to take its share back")
    stays(lambda: split(client, keys) == {"a": 2, "b": 2, "c": 2}, 2 * 2)
    assert all(client.job(key)["attempts"] == 1 for key in keys)
    assert_one_process_at_a_time(read_ledger(tmp_path / "ledger.txt"))


@redis_only
def test_guarantee_2_a_rolling_restart_loses_nothing_and_ends_no_long_running_job(
    pool: Pool, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    handlers = {**MOVABLE, "ledger": {"path": "ledger.py", "timeout": 60}}
    configs = {name: pool.config(handlers, file=f"{name}.toml", id=name, capacity=6,
                                 lease_ttl=2, drain_timeout=2)
               for name in ("a", "b", "c")}
    supervisors = {name: pool.start(config) for name, config in configs.items()}
    client = pool.client()
    long_keys = [f"long-{i}" for i in range(6)]
    dispatch(client, long_keys, tmp_path)
    finite = []
    for i in range(194):
        key = f"job-{i}"
        busy = i % 4 == 0  # a quarter CPU-bound
        client.dispatch(key, {"ledger": str(ledger), "seconds": 0.3 if busy else 0.05,
                              "busy": busy}, handler="ledger")
        finite.append(key)

    for name in ("a", "b", "c"):
        wait_for(lambda: sum(split(client, long_keys).values()) == 6, 30,
                 message="every long-running job running")
        supervisors[name].signal(15)
        assert supervisors[name].wait(60) == 0, supervisors[name].log()
        supervisors[name] = pool.start(configs[name])

    wait_for(lambda: all(client.job(key)["state"] == "succeeded" for key in finite), 120,
             message="every finite job to succeed")
    wait_for(lambda: sum(split(client, long_keys).values()) == 6, 30,
             message="every long-running job running")
    for key in finite + long_keys:
        assert client.job(key)["attempts"] == 1, client.job(key)
    assert_one_process_at_a_time(read_ledger(ledger))
