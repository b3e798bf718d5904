"""Many supervisors as one pool (guarantees 2 and 6): a drain hands long-running jobs
over instead of ending them."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.helpers.pool import assert_one_process_at_a_time, read_ledger, wait_for
from tests.integration.conftest import Pool

LONG = {"long": {"path": "long_running.py", "timeout": 0, "max_attempts": 3}}


def owners(client, keys):  # type: ignore[no-untyped-def]
    records = [client.job(key) for key in keys]
    return {r["key"]: r for r in records if r["state"] == "running" and r["pid"]}


def test_guarantee_6_a_drain_hands_stop_aware_long_running_jobs_to_another_supervisor(
    pool: Pool, ledger: Path, tmp_path: Path
) -> None:
    reasons = tmp_path / "reasons.txt"
    first = pool.start(pool.config(LONG, file="a.toml", id="a", capacity=2, lease_ttl=2,
                                   drain_timeout=0.5, stop_grace=2))
    client = pool.client()
    keys = ["long-1", "long-2"]
    for key in keys:
        client.dispatch(key, {"ledger": str(ledger), "reasons": str(reasons)}, handler="long")
    wait_for(lambda: len(owners(client, keys)) == 2, 20, message="jobs to run on a")
    wait_for(lambda: all((client.job(key)["checkpoint"] or {}).get("count", 0) >= 10
                         for key in keys), 20, message="checkpoints on a")
    pool.start(pool.config(LONG, file="b.toml", id="b", capacity=2, lease_ttl=2))

    first.signal(signal.SIGTERM)
    assert first.wait(30) == 0, first.log()

    def on_b():  # type: ignore[no-untyped-def]
        running = owners(client, keys)
        return len(running) == 2 and all(r["supervisor"] == "b" for r in running.values())

    wait_for(on_b, 20, message="both jobs running on b")
    events = [line.split() for line in reasons.read_text().splitlines()]
    stops = {key: (int(token), why) for kind, key, token, why in events if kind == "stop"}
    assert {key: why for key, (_, why) in stops.items()} == {key: "drain" for key in keys}
    for key in keys:
        record = client.job(key)
        assert record["state"] == "running" and record["attempts"] == 1, record
        # The run on b resumed from a checkpoint saved on a, not from the start.
        starts = [int(count) for kind, k, token, count in events
                  if kind == "start" and k == key and int(token) == record["token"]]
        assert starts and starts[0] >= 10, (key, events)
    assert_one_process_at_a_time(read_ledger(ledger))


def test_status_shows_a_job_pid_as_soon_as_its_child_starts(pool: Pool, ledger: Path) -> None:
    pool.start(pool.config({"ledger": {"path": "ledger.py", "timeout": 0}}, lease_ttl=30))
    client = pool.client()
    client.dispatch("k", {"ledger": str(ledger), "seconds": 20}, handler="ledger")
    wait_for(lambda: read_ledger(ledger), 20, message="the child to run")
    # Renewals come every 10 s here; the pid must not wait for one.
    record = wait_for(lambda: client.job("k")["pid"] and client.job("k"), 2,
                      message="the pid in the record")
    assert record["pid"] == read_ledger(ledger)[0].pid
    (running,) = client.status()["running"]
    assert running["pid"] == record["pid"]
