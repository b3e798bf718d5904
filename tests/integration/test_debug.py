"""`poolsup debug KEY` from outside, on Redis and SQLite (the busy loop on PostgreSQL
too): the stacks of a job busy in a loop (its line named, other threads too, its
subprocess untouched), a job stuck in C code that says so, and the exit codes of a job
not running or unknown."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import psutil

from tests.acceptance.test_cli import poolsup
from tests.helpers.pool import wait_for
from tests.integration.conftest import Pool

HANDLERS = {
    "spin": {"path": "debuggable.py", "function": "spin", "timeout": 0},
    "stuck": {"path": "debuggable.py", "function": "stuck_in_c", "timeout": 0},
}
BUSY_LINE = "count += 1  # the busy line"


def running(client, key: str) -> bool:  # type: ignore[no-untyped-def]
    record = client.job(key)
    return bool(record["state"] == "running" and record["pid"])


def test_debug_names_the_busy_line_of_a_running_job(pool: Pool, tmp_path: Path) -> None:
    config = pool.config(HANDLERS)
    pool.start(config)
    client = pool.client()
    pid_file = tmp_path / "sleeper.pid"
    client.dispatch("busy", {"pid_file": str(pid_file)}, handler="spin")
    wait_for(lambda: running(client, "busy") and pid_file.exists(), 20, message="the job")

    done = poolsup("debug", "-c", str(config), "busy", "--json")

    assert done.returncode == 0, done.stderr
    answer = orjson.loads(done.stdout)
    assert answer["pid"] == client.job("busy")["pid"]
    main, *others = answer["threads"]
    (spin,) = [frame for frame in main["frames"] if frame["function"] == "spin"]
    assert main["main"] and spin["file"].endswith("debuggable.py")
    assert spin["code"] in (BUSY_LINE, "for _ in range(1_000_000):")
    assert "helper" in {thread["thread"] for thread in others}
    text = poolsup("debug", "-c", str(config), "busy").stdout
    assert 'in spin\n' in text and "Thread MainThread (main)" in text
    # Only the job's own process was asked: its subprocess lives on.
    assert psutil.pid_exists(int(pid_file.read_text()))
    assert client.job("busy")["state"] == "running"


def test_debug_of_a_job_stuck_in_c_code_says_so(pool: Pool) -> None:
    config = pool.config(HANDLERS, stop_grace=1)
    pool.start(config)
    client = pool.client()
    client.dispatch("stuck", {}, handler="stuck")
    wait_for(lambda: running(client, "stuck"), 20, message="the job")

    done = poolsup("debug", "-c", str(config), "stuck")

    assert done.returncode == 0, done.stderr
    assert "blocked in C code" in done.stdout
    client.stop("stuck")


def test_debug_of_a_job_not_running_or_unknown(pool: Pool) -> None:
    config = pool.config(HANDLERS)
    client = pool.client()
    client.dispatch("waiting", {}, handler="spin")  # no supervisor: it stays pending

    not_running = poolsup("debug", "-c", str(config), "waiting")
    unknown = poolsup("debug", "-c", str(config), "nosuch")

    assert not_running.returncode == 1
    assert "is pending, not running" in not_running.stderr
    assert unknown.returncode == 4
    assert os.environ.get("POOLSUP_CONFIG") is None
