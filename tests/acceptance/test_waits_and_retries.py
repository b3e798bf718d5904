"""`dispatch --wait`, `wait` and `retry` as a user runs them, against a real supervisor on
each store: exit codes 0/5/6/7/4 and 0/3/4, one line on stderr for each refusal."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.acceptance.test_cli import poolsup
from tests.helpers.pool import SupervisorProcess, wait_for, write_pool

HANDLERS = {
    "echo": {"path": "outcomes.py", "function": "async_echo"},
    "fails": {"path": "outcomes.py", "function": "always_fails", "max_attempts": 1},
    "until_file": {"path": "outcomes.py", "function": "fails_until_file", "max_attempts": 1},
    "waits": {"path": "outcomes.py", "function": "waits_for_stop"},
}


@pytest.fixture(params=["redis", "sqlite"])
def config(request: pytest.FixtureRequest, tmp_path: Path, pool_name: str) -> Iterator[str]:
    store = (request.getfixturevalue("redis_url") if request.param == "redis"
             else f"sqlite:///{tmp_path}/pool.db")
    path = write_pool(tmp_path, store=store, pool=pool_name, handlers=HANDLERS, capacity=4)
    supervisor = SupervisorProcess(path, tmp_path / "supervisor.log").start().wait_serving()
    try:
        yield str(path)
    finally:
        supervisor.kill()


def one_line(result: subprocess.CompletedProcess[str], *words: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


def record(config: str, key: str) -> dict[str, Any]:
    shown = poolsup("job", "-c", config, key, "--json")
    assert shown.returncode == 0, shown.stderr
    value: dict[str, Any] = orjson.loads(shown.stdout)
    return value


def running(config: str, key: str) -> dict[str, Any] | None:
    found = record(config, key)
    return found if found["state"] == "running" else None


def test_dispatch_wait_and_wait_exit_by_how_the_job_ended(config: str) -> None:
    ok = poolsup("dispatch", "-c", config, "e1", "-H", "echo", "--payload", '{"a": 1}',
                 "--wait", "--timeout", "30")
    assert ok.returncode == 0, ok.stderr
    assert orjson.loads(ok.stdout) == {"echo": {"a": 1}}

    failed = poolsup("dispatch", "-c", config, "f1", "-H", "fails", "--wait")
    assert failed.returncode == 5, failed.stderr
    one_line(failed, "f1", "failed", "ValueError: always fails")

    assert poolsup("dispatch", "-c", config, "w1", "-H", "waits").returncode == 0
    late = poolsup("wait", "-c", config, "w1", "--timeout", "0.5")
    assert late.returncode == 7, late.stderr
    one_line(late, "w1", "still")
    assert record(config, "w1")["state"] in ("pending", "running")

    waiter = subprocess.Popen([sys.executable, "-m", "supervisor.cli", "wait", "-c", config,
                               "w1", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    wait_for(lambda: running(config, "w1"), 20, message="w1 to run")
    assert poolsup("stop", "-c", config, "w1").returncode == 0
    out, err = waiter.communicate(timeout=20)
    assert waiter.returncode == 6, err
    assert orjson.loads(out)["state"] == "stopped"
    one_line(subprocess.CompletedProcess([], 6, out, err), "w1", "stopped")

    ghost = poolsup("wait", "-c", config, "ghost")
    assert ghost.returncode == 4
    one_line(ghost, "ghost")

    done = poolsup("wait", "-c", config, "e1", "--json")
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["state"] == "succeeded"


def test_retry_runs_a_failed_or_stopped_job_again_from_attempt_one(
    config: str, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    payload = orjson.dumps({"path": str(marker)}).decode()
    first = poolsup("dispatch", "-c", config, "r1", "-H", "until_file", "--payload", payload,
                    "--wait")
    assert first.returncode == 5, first.stderr

    marker.write_text("here")
    retried = poolsup("retry", "-c", config, "r1")
    assert retried.returncode == 0, retried.stderr
    assert "r1" in retried.stdout
    again = poolsup("wait", "-c", config, "r1", "--json", "--timeout", "30")
    assert again.returncode == 0, again.stderr
    ended = orjson.loads(again.stdout)
    assert (ended["attempts"], ended["error"]) == (1, None)
    assert ended["result"] == {"found": str(marker), "attempt": 1}

    succeeded = poolsup("retry", "-c", config, "r1")
    assert succeeded.returncode == 3
    one_line(succeeded, "r1", "succeeded")
    unknown = poolsup("retry", "-c", config, "ghost")
    assert unknown.returncode == 4
    one_line(unknown, "ghost")

    assert poolsup("dispatch", "-c", config, "w2", "-H", "waits").returncode == 0
    wait_for(lambda: running(config, "w2"), 20, message="w2 to run")
    live = poolsup("retry", "-c", config, "w2")
    assert live.returncode == 3
    one_line(live, "w2", "running")
    assert poolsup("stop", "-c", config, "w2").returncode == 0
    assert record(config, "w2")["state"] == "stopped"

    assert poolsup("retry", "-c", config, "w2").returncode == 0
    rerun = wait_for(lambda: running(config, "w2"), 20, message="w2 to run again")
    assert (rerun["attempts"], rerun["stop_requested"]) == (1, False)
    assert poolsup("stop", "-c", config, "w2").returncode == 0


def test_stop_no_wait_says_the_stop_was_requested(config: str) -> None:
    assert poolsup("dispatch", "-c", config, "w3", "-H", "waits").returncode == 0
    wait_for(lambda: running(config, "w3"), 20, message="w3 to run")
    asked = poolsup("stop", "-c", config, "w3", "--no-wait")
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.strip() == "w3: running, stop requested"
    wait_for(lambda: record(config, "w3")["state"] == "stopped", 20, message="w3 to stop")
