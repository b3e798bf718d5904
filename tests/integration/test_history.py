"""A job's history with real supervisors, on Redis and SQLite: a job moved by a drain shows
both supervisors, each start with its child's pid, and why it was released."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.helpers.pool import wait_for
from tests.integration.conftest import Pool

LONG = {"long": {"path": "long_running.py", "timeout": 0, "max_attempts": 3}}


def test_a_job_moved_by_a_drain_shows_both_supervisors_in_its_history(
    pool: Pool, ledger: Path, tmp_path: Path
) -> None:
    first = pool.start(pool.config(LONG, file="a.toml", id="a", capacity=1, lease_ttl=2,
                                   drain_timeout=0.5, stop_grace=2))
    client = pool.client()
    client.dispatch("mover", {"ledger": str(ledger), "reasons": str(tmp_path / "why.txt")},
                    handler="long")
    on_a = wait_for(lambda: (r := client.job("mover"))["pid"] and r, 20, message="a run on a")
    pool.start(pool.config(LONG, file="b.toml", id="b", capacity=1, lease_ttl=2))
    first.signal(signal.SIGTERM)
    assert first.wait(30) == 0, first.log()
    on_b = wait_for(lambda: (r := client.job("mover"))["supervisor"] == "b" and r["pid"] and r,
                    20, message="the run on b")
    client.stop("mover")

    events = [(e["event"], e["supervisor"], e["token"], e["detail"])
              for e in client.job("mover")["events"]]

    assert events == [
        ("dispatched", None, None, None),
        ("started", "a", on_a["token"], f"attempt 1, pid {on_a['pid']}"),
        ("released", "a", on_a["token"], "drain"),
        ("started", "b", on_b["token"], f"attempt 1, pid {on_b['pid']}"),
        ("stopping", "b", on_b["token"], "stop"),
        ("stopped", "b", on_b["token"], "stopped by request"),
    ]
