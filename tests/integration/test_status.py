"""`poolsup status --json` and `poolsup stop` against a live supervisor."""

from __future__ import annotations

import subprocess
import sys

import orjson
import psutil

from tests.helpers.pool import wait_for
from tests.integration.conftest import Pool

HANDLERS = {"waits": {"path": "outcomes.py", "function": "waits_for_stop", "timeout": 0}}


def poolsup(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "supervisor.cli", *args],
                          capture_output=True, text=True, timeout=60)


def test_status_json_shows_supervisors_counts_and_running_jobs(pool: Pool) -> None:
    config = pool.config(HANDLERS, id="web-1", capacity=3, lease_ttl=3)
    supervisor = pool.start(config)
    client = pool.client()
    client.dispatch("k1", {}, handler="waits")

    def running_with_stats():  # type: ignore[no-untyped-def]
        status = orjson.loads(poolsup("status", "-c", str(config), "--json").stdout)
        jobs = status["running"]
        return status if jobs and jobs[0]["rss_bytes"] else None

    status = wait_for(running_with_stats, 20, interval=0.3, message="stats in status")
    assert status["pool"] == pool.name
    (sup,) = status["supervisors"]
    assert (sup["id"], sup["pid"], sup["capacity"], sup["running"], sup["state"]) == (
        "web-1", supervisor.pid, 3, 1, "running")
    assert sup["last_seen"] < 3
    assert status["counts"]["running"] == 1
    (job,) = status["running"]
    assert job["key"] == "k1" and job["handler"] == "waits" and job["supervisor"] == "web-1"
    assert job["attempt"] == 1 and job["token"] >= 1
    assert psutil.Process(job["pid"]).ppid() != supervisor.pid  # forked by the fork server
    assert 0 < job["lease_remaining"] <= 3
    assert job["runtime"] >= 0 and job["cpu_percent"] is not None

    text = poolsup("status", "-c", str(config))
    assert text.returncode == 0 and "web-1" in text.stdout and "k1" in text.stdout

    stopped = poolsup("stop", "-c", str(config), "k1")
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped" in stopped.stdout
    assert not psutil.pid_exists(job["pid"]) or (
        psutil.Process(job["pid"]).status() == psutil.STATUS_ZOMBIE
    )
    assert client.job("k1")["state"] == "stopped"


def test_stop_removes_a_pending_job(pool: Pool) -> None:
    config = pool.config(HANDLERS)
    client = pool.client()
    client.dispatch("queued", {}, handler="waits")
    result = poolsup("stop", "-c", str(config), "queued")
    assert result.returncode == 0
    assert client.job("queued")["state"] == "stopped"
