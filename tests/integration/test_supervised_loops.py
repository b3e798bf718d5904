"""A bug in a background loop costs that loop a restart, not the supervisor and its
jobs: here a real one, a change hint whose key is not UTF-8 on the pool's Redis
channel (anyone who can publish there can send it), which the event listener cannot
decode."""

from __future__ import annotations

import pytest
import redis

from supervisor.store.redis.keys import PoolKeys
from tests.helpers.pool import finished, wait_for
from tests.helpers.redis_server import free_port
from tests.integration.conftest import Pool
from tests.integration.test_metrics import scrape, with_metrics

HANDLERS = {
    "sleeps": {"path": "edges.py", "function": "sleeps"},
    "normal": {"path": "basic.py", "function": "echo"},
}


@pytest.fixture
def store_url(redis_url: str) -> str:
    return redis_url  # the trigger is Redis pub/sub


def test_a_failing_event_listener_is_restarted_and_jobs_keep_running(
    pool: Pool, redis_url: str
) -> None:
    port = free_port()
    supervisor = pool.start(with_metrics(pool.config(HANDLERS, capacity=2, lease_ttl=2), port))
    client = pool.client()
    client.dispatch("running", {"seconds": 3}, handler="sleeps")
    wait_for(lambda: client.job("running")["state"] == "running", 20,
             message="the job to run")
    with redis.Redis.from_url(redis_url) as admin:
        wait_for(lambda: admin.publish(PoolKeys(pool.name).channel, b"s:\xff") > 0, 10,
                 message="the supervisor to listen")
    wait_for(lambda: "event listener loop failed" in supervisor.log()
             or supervisor.process.poll() is not None, 20, message="the listener to fail")
    assert supervisor.process.poll() is None, supervisor.log()
    assert "UnicodeDecodeError" in supervisor.log()  # the traceback is logged
    restarts = scrape(port).get(("poolsup_loop_restarts_total", (("loop", "event listener"),)))
    assert restarts == 1.0, scrape(port)

    record = wait_for(lambda: finished(client, "running"), 30, message="the running job")
    assert record["state"] == "succeeded", record
    client.dispatch("after", {"x": 1}, handler="normal")
    record = wait_for(lambda: finished(client, "after"), 20, message="the next job")
    assert record["state"] == "succeeded", record
    assert supervisor.process.poll() is None, supervisor.log()
