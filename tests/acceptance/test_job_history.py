"""`poolsup job KEY` shows the job's history from outside, against a real supervisor on
each store: `--json` has `events` (oldest first, each with at, event, supervisor,
token and detail), the text one line per event."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.acceptance.test_cli import poolsup
from tests.helpers.pool import SupervisorProcess, write_pool

HANDLERS = {
    "echo": {"path": "outcomes.py", "function": "async_echo"},
    "fails": {"path": "outcomes.py", "function": "always_fails", "max_attempts": 1},
}


@pytest.fixture(params=["redis", "sqlite"])
def config(request: pytest.FixtureRequest, tmp_path: Path, pool_name: str) -> Iterator[str]:
    store = (request.getfixturevalue("redis_url") if request.param == "redis"
             else f"sqlite:///{tmp_path}/pool.db")
    path = write_pool(tmp_path, store=store, pool=pool_name, handlers=HANDLERS,
                      id="host-1")
    supervisor = SupervisorProcess(path, tmp_path / "supervisor.log").start().wait_serving()
    try:
        yield str(path)
    finally:
        supervisor.kill()


def test_job_shows_the_history_of_a_run_in_json_and_text(config: str) -> None:
    for key, handler in (("ok", "echo"), ("bad", "fails")):
        done = poolsup("dispatch", "-c", config, key, "-H", handler, "--wait", "--timeout", "30")
        assert done.returncode in (0, 5), done.stderr

    shown = poolsup("job", "-c", config, "ok", "--json")
    assert shown.returncode == 0, shown.stderr
    record = orjson.loads(shown.stdout)
    events = record["events"]
    assert [e["event"] for e in events] == ["dispatched", "started", "succeeded"]
    assert all(set(e) == {"at", "event", "supervisor", "token", "detail"} for e in events)
    assert [e["at"] for e in events] == sorted(e["at"] for e in events)
    assert events[1]["supervisor"] == events[2]["supervisor"] == "host-1"
    assert events[1]["token"] == events[2]["token"] == record["token"]
    assert events[1]["detail"].startswith("attempt 1")

    failed = orjson.loads(poolsup("job", "-c", config, "bad", "--json").stdout)["events"]
    assert failed[-1]["event"] == "failed"
    assert failed[-1]["detail"].startswith("ValueError: always fails")

    text = poolsup("job", "-c", config, "bad")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    history = lines[lines.index("events:") + 1:]
    assert [line.split()[1] for line in history] == ["dispatched", "started", "failed"]
    assert "host-1 (token" in history[1] and "ValueError: always fails" in history[2]
