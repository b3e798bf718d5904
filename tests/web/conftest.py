"""A real pool for the dashboard tests: Redis, one supervisor running the dashboard
handlers, and the blocking client."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from supervisor import Client
from tests.helpers.pool import SupervisorProcess, write_pool


@dataclass(frozen=True)
class WebPool:
    config: Path
    directory: Path
    client: Client


@pytest.fixture(scope="module")
def web_pool(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[WebPool]:
    directory = tmp_path_factory.mktemp("web")
    pool = f"web-{directory.name[-6:]}"
    config = write_pool(
        directory, store=redis_url, pool=pool, id="web-sup-1", capacity=8, lease_ttl=5,
        drain_timeout=2, stop_grace=5,
        handlers={
            "worker": {"path": "dashboard.py", "function": "until_stopped", "timeout": 0},
            "broken": {"path": "dashboard.py", "function": "fails_with", "max_attempts": 1},
            "bulk": {"path": "dashboard.py", "function": "fails_with"},
            "snoozer": {"path": "snoozing.py", "function": "snoozes_once"},
        })
    supervisor = SupervisorProcess(config, directory / "supervisor.log").start()
    client = Client.from_config(config)
    try:
        supervisor.wait_serving()
        client.pause(["bulk"])  # its jobs stay pending: the listing's records
        yield WebPool(config, directory, client)
    finally:
        client.close()
        supervisor.signal(15)
        try:
            supervisor.wait(30)
        finally:
            supervisor.kill()
