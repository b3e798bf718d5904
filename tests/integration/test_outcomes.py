"""Each way an attempt can end lands in the documented state, with the error recorded."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.pool import finished, wait_for
from tests.integration.conftest import Pool

HANDLERS: dict[str, dict[str, Any]] = {
    "flaky": {"path": "outcomes.py", "function": "flaky", "max_attempts": 3},
    "always_fails": {"path": "outcomes.py", "function": "always_fails", "max_attempts": 2},
    "fails_for_good": {"path": "outcomes.py", "function": "fails_for_good", "max_attempts": 3},
    "sleeps": {"path": "outcomes.py", "function": "sleeps", "timeout": 1, "max_attempts": 1},
    "naps": {"path": "outcomes.py", "function": "sleeps", "timeout": 0},
    "unserializable": {"path": "outcomes.py", "function": "unserializable", "max_attempts": 1},
    "environment": {"path": "outcomes.py", "function": "environment"},
    "async_echo": {"path": "outcomes.py", "function": "async_echo"},
    "waits_for_stop": {"path": "outcomes.py", "function": "waits_for_stop", "timeout": 0},
    "listens": {"path": "outcomes.py", "function": "listens"},
    "crashes": {"path": "outcomes.py", "function": "crashes", "max_attempts": 1},
    "broken": {"path": "broken_import.py", "max_attempts": 1},
}


@pytest.fixture
def running_pool(pool: Pool) -> Pool:
    pool.start(pool.config(HANDLERS, capacity=8, lease_ttl=2, stop_grace=2))
    return pool



def test_retries_with_backoff_until_success(running_pool: Pool) -> None:
    client = running_pool.client()
    client.dispatch("flaky", {"succeed_on": 3}, handler="flaky")
    record = wait_for(lambda: finished(client, "flaky"), 30, message="flaky job")
    assert record["state"] == "succeeded"
    assert record["attempts"] == 3
    assert record["result"]["attempt"] == 3
    # two failures: backoff of at least 0.5 s then 1 s before the third start
    assert record["result"]["started"] - record["created_at"] >= 1.5


def test_max_attempts_fails_for_good_with_the_error(running_pool: Pool) -> None:
    client = running_pool.client()
    client.dispatch("always", None, handler="always_fails")
    record = wait_for(lambda: finished(client, "always"), 30, message="failing job")
    assert record["state"] == "failed"
    assert record["attempts"] == 2
    assert "ValueError: always fails" in record["error"]


def test_sandbox_fail_is_not_retried(running_pool: Pool) -> None:
    client = running_pool.client()
    client.dispatch("fail", None, handler="fails_for_good")
    record = wait_for(lambda: finished(client, "fail"), 20, message="Fail job")
    assert record["state"] == "failed"
    assert record["attempts"] == 1
    assert "bad input, do not retry" in record["error"]


def test_timeout_fails_the_attempt(running_pool: Pool) -> None:
    client = running_pool.client()
    client.dispatch("slow", {"seconds": 60}, handler="sleeps")
    record = wait_for(lambda: finished(client, "slow"), 20, message="timeout")
    assert record["state"] == "failed"
    assert record["error"] == "timeout after 1 s"


def test_unserializable_result_fails_clearly(running_pool: Pool) -> None:
    client = running_pool.client()
    client.dispatch("obj", None, handler="unserializable")
    record = wait_for(lambda: finished(client, "obj"), 20, message="unserializable")
    assert record["state"] == "failed"
    assert "result is not JSON-serializable" in record["error"]


def test_handler_that_fails_to_import_fails_its_jobs_with_the_traceback(
    running_pool: Pool,
) -> None:
    client = running_pool.client()
    client.dispatch("imp", None, handler="broken")
    record = wait_for(lambda: finished(client, "imp"), 20, message="broken import")
    assert record["state"] == "failed"
    assert "handler file failed to import" in record["error"]
    assert "this_module_does_not_exist" in record["error"]


def test_crash_without_result_records_the_exit_code(running_pool: Pool) -> None:
    client = running_pool.client()
    client.dispatch("crash", None, handler="crashes")
    record = wait_for(lambda: finished(client, "crash"), 20, message="crash")
    assert record["state"] == "failed"
    assert record["error"] == "exit code 7"


def test_handler_sees_its_context_and_environment(running_pool: Pool) -> None:
    client = running_pool.client()
    client.dispatch("env", {"x": [1, 2]}, handler="environment")
    record = wait_for(lambda: finished(client, "env"), 20, message="env job")
    assert record["state"] == "succeeded"
    assert record["result"] == {
        "key": "env", "token": str(record["token"]), "attempt": "1", "payload": {"x": [1, 2]},
    }
    client.dispatch("async", "hi", handler="async_echo")
    assert wait_for(lambda: finished(client, "async"), 20)["result"] == {"echo": "hi"}


def test_stop_ends_a_running_job_stopped(running_pool: Pool, tmp_path: Path) -> None:
    client = running_pool.client()
    marker = tmp_path / "marker"
    client.dispatch("stoppable", {"marker": str(marker)}, handler="waits_for_stop")
    record = wait_for(lambda: (r := client.job("stoppable"))["pid"] and r, 20)
    stopped = client.stop("stoppable", timeout=20)
    assert stopped["state"] == "stopped"
    assert marker.read_text() == "stopped cleanly"
    import psutil

    assert not psutil.pid_exists(record["pid"]) or (
        psutil.Process(record["pid"]).status() == psutil.STATUS_ZOMBIE
    )


def test_notification_kept_while_pending_reaches_the_handler(running_pool: Pool) -> None:
    client = running_pool.client()
    client.dispatch("ears", None, handler="listens")
    client.notify("ears", {"hello": 1})
    record = wait_for(lambda: finished(client, "ears"), 20, message="listener")
    assert record["result"] == {"note": {"hello": 1}}


def test_drain_on_sigterm_lets_short_jobs_finish_and_exits_0(pool: Pool) -> None:
    supervisor = pool.start(pool.config(HANDLERS, capacity=2, drain_timeout=20))
    client = pool.client()
    client.dispatch("short", {"seconds": 1.5}, handler="async_echo")
    client.dispatch("nap", {"seconds": 2}, handler="naps")
    wait_for(lambda: client.job("nap")["state"] == "running", 20)
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(30) == 0
    assert client.job("nap")["state"] == "succeeded"


def test_drain_timeout_releases_without_spending_an_attempt(pool: Pool) -> None:
    supervisor = pool.start(pool.config(HANDLERS, capacity=2, drain_timeout=0.5, stop_grace=1))
    client = pool.client()
    client.dispatch("long", None, handler="waits_for_stop")
    wait_for(lambda: client.job("long")["pid"], 20)
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(30) == 0
    record = client.job("long")
    assert record["state"] == "pending"
    assert record["attempts"] == 0
