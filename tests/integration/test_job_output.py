"""`poolsup logs KEY` with real supervisors, on Redis and SQLite (the first test on
PostgreSQL too): a job's output while it runs and after it ended, two attempts shown
apart, the output of a job that ran on another supervisor, `--follow` until the job
ends, a job that prints without end bounded in the store while its lease renews, and
max_log = 0 keeping nothing."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import redis

from supervisor.store.redis.keys import PoolKeys
from tests.acceptance.test_cli import poolsup
from tests.helpers.pool import finished, wait_for
from tests.integration.conftest import Pool

HANDLERS = {
    "talks": {"path": "printing.py", "function": "talks", "timeout": 0},
    "fails_once": {"path": "printing.py", "function": "fails_once", "max_attempts": 2},
    "forever": {"path": "printing.py", "function": "prints_forever", "timeout": 0},
}
SMALL_LOG = 64 * 1024


def logs(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return poolsup("logs", "-c", str(config), *args)


def test_logs_shows_a_jobs_output_while_it_runs_and_after_it_ended(
    pool: Pool, tmp_path: Path
) -> None:
    config = pool.config(HANDLERS)
    pool.start(config)
    client = pool.client()
    go = tmp_path / "go"
    client.dispatch("talker", {"go": str(go)}, handler="talks")

    wait_for(lambda: "to stderr" in "".join(a.text for a in client.logs("talker")), 20,
             message="the first lines in the store")
    running = logs(config, "talker")
    go.touch()
    wait_for(lambda: finished(client, "talker"), 20, message="the job's end")
    after = logs(config, "talker")

    assert running.returncode == 0, running.stderr
    token = client.job("talker")["token"]
    assert running.stdout == (f"--- attempt 1, supervisor {client.job('talker')['supervisor']}, "
                              f"token {token} ---\nbefore 0\nbefore 1\nbefore 2\nto stderr\n")
    assert after.returncode == 0, after.stderr
    assert after.stdout == running.stdout + "after 0\nafter 1\n"
    (attempt,) = client.logs("talker")
    assert (attempt.attempt, attempt.ended, attempt.dropped_bytes) == (1, True, 0)


def test_two_attempts_are_shown_apart(pool: Pool) -> None:
    config = pool.config(HANDLERS, id="sup-x")
    pool.start(config)
    client = pool.client()
    client.dispatch("twice", {}, handler="fails_once")
    wait_for(lambda: finished(client, "twice"), 30, message="the second attempt's end")

    shown = logs(config, "twice")
    second = logs(config, "twice", "--attempt", "2")
    missing = logs(config, "twice", "--attempt", "3")
    unknown = logs(config, "nobody")

    tokens = [attempt.token for attempt in client.logs("twice")]
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == (
        f"--- attempt 1, supervisor sup-x, token {tokens[0]} ---\nattempt 1 says hello\n"
        f"--- attempt 2, supervisor sup-x, token {tokens[1]} ---\nattempt 2 says hello\n")
    assert second.stdout == (
        f"--- attempt 2, supervisor sup-x, token {tokens[1]} ---\nattempt 2 says hello\n")
    assert (missing.returncode, missing.stdout) == (4, "")
    assert missing.stderr.strip() == ("poolsup: job 'twice' has no output of attempt 3 "
                                      "(attempts with output: 1, 2)")
    assert unknown.returncode == 4 and "nobody" in unknown.stderr
    assert [(a.attempt, a.text) for a in client.logs("twice", attempt=1)] == [
        (1, "attempt 1 says hello\n")]


def test_logs_of_a_job_that_ran_on_a_supervisor_since_gone(pool: Pool, tmp_path: Path) -> None:
    first = pool.start(pool.config(HANDLERS, file="a.toml", id="a", capacity=1,
                                   drain_timeout=0.5, stop_grace=2))
    client = pool.client()
    client.dispatch("mover", {"go": str(tmp_path / "never")}, handler="talks")
    wait_for(lambda: client.logs("mover"), 20, message="output of the run on a")
    pool.start(pool.config(HANDLERS, file="b.toml", id="b", capacity=1))
    first.signal(signal.SIGTERM)  # drains: the job is released to b, which runs it again
    assert first.wait(30) == 0, first.log()
    wait_for(lambda: len(client.logs("mover")) == 2, 20, message="output of the run on b")
    # Read with only the store: a config of no supervisor's.
    reader = pool.config({}, file="reader.toml")

    shown = logs(reader, "mover")

    assert shown.returncode == 0, shown.stderr
    on_a, on_b = client.logs("mover")
    assert (on_a.supervisor, on_a.attempt, on_a.ended) == ("a", 1, True)
    assert (on_b.supervisor, on_b.attempt, on_b.ended) == ("b", 1, False)
    assert on_a.text.startswith("before 0\nbefore 1\nbefore 2\nto stderr\n")
    assert f"--- attempt 1, supervisor a, token {on_a.token} ---\nbefore 0\n" in shown.stdout
    assert f"--- attempt 1, supervisor b, token {on_b.token} ---\nbefore 0\n" in shown.stdout
    client.stop("mover")


def test_follow_prints_new_output_and_exits_when_the_job_ends(
    pool: Pool, tmp_path: Path
) -> None:
    config = pool.config(HANDLERS)
    pool.start(config)
    client = pool.client()
    go = tmp_path / "go"
    client.dispatch("followed", {"go": str(go)}, handler="talks")
    wait_for(lambda: client.logs("followed"), 20, message="the first output")
    follower = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "logs", "-c", str(config), "followed",
         "--follow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        assert follower.poll() is None  # still following the running job
        go.touch()  # the job prints its last lines, then ends

        out, err = follower.communicate(timeout=20)
    finally:
        follower.kill()

    assert follower.returncode == 0, err
    assert out.endswith("before 2\nto stderr\nafter 0\nafter 1\n")
    assert out.count("--- attempt 1") == 1


def test_a_job_printing_without_end_is_bounded_in_the_store_and_keeps_its_lease(
    pool: Pool,
) -> None:
    lease_ttl = 3
    config = pool.config(HANDLERS, lease_ttl=lease_ttl, pool_options={"max_log": SMALL_LOG})
    pool.start(config)
    client = pool.client()
    client.dispatch("noisy", {}, handler="forever")
    wait_for(lambda: client.logs("noisy"), 20, message="the first output")

    remaining, kept = [], []
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        (running,) = client.status()["running"]
        remaining.append(running["lease_remaining"])
        kept.append(stored_bytes(pool, "noisy"))
        time.sleep(0.2)
    (attempt,) = client.logs("noisy")
    client.stop("noisy")

    record = client.job("noisy")
    assert record["state"] == "stopped"
    assert "lease_lost" not in [event["event"] for event in record["events"]]
    assert min(remaining) > lease_ttl / 3, remaining  # renewed every ttl/3, little lag
    assert max(kept) <= SMALL_LOG + 64 * 1024, kept  # max_log and its slack
    assert attempt.dropped_bytes > 50 * SMALL_LOG  # it printed far more than is kept
    (last,) = client.logs("noisy")
    assert last.ended and last.text.endswith("stopped printing\n")
    assert len(last.text) == SMALL_LOG


def stored_bytes(pool: Pool, key: str) -> int:
    """Bytes the store holds of the job's output (all runs)."""
    if pool.store.startswith("redis"):
        keys = PoolKeys(pool.name)
        with redis.Redis.from_url(pool.store) as raw:
            return sum(int(raw.strlen(name)) for name in raw.scan_iter(
                match=keys.output_run(key, 0).replace(":0:", ":*:")))
    with sqlite3.connect(pool.store.removeprefix("sqlite://")) as conn:
        return int(conn.execute("SELECT coalesce(sum(length(data)), 0) FROM output_chunks "
                                "WHERE key = ?", (key,)).fetchone()[0])


def test_max_log_0_keeps_no_output(pool: Pool, tmp_path: Path) -> None:
    config = pool.config(HANDLERS, pool_options={"max_log": 0})
    pool.start(config)
    client = pool.client()
    go = tmp_path / "go"
    go.touch()
    client.dispatch("quiet", {"go": str(go)}, handler="talks")
    wait_for(lambda: finished(client, "quiet"), 20, message="the job's end")

    shown = logs(config, "quiet")

    assert client.logs("quiet") == []
    assert (shown.returncode, shown.stdout) == (0, "")
    assert "no output kept" in shown.stderr
    assert stored_bytes(pool, "quiet") == 0
