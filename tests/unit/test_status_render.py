"""`status`: shares and moving jobs, the store's master, as JSON and as text."""

import dataclasses

from supervisor.cli.status import render_status_text
from supervisor.reports.status import render_status_json
from supervisor.store.records import (
    JobRecord,
    PoolSnapshot,
    StoreHealth,
    SupervisorInfo,
    SupervisorStatus,
)


def member(id: str, capacity: int, running: int, *, state: str = "running",
           inbound: int = 0) -> SupervisorStatus:
    info = SupervisorInfo(id=id, instance=id, host="h", pid=1, capacity=capacity,
                          lease_ttl=10.0, state=state, handlers=("long",),
                          rebalance=("long",))
    return SupervisorStatus(info=info, last_seen=0.5, running=running,
                            running_by_handler={"long": running} if running else {},
                            inbound=inbound)


def moving_job() -> JobRecord:
    return JobRecord(key="k1", handler="long", state="pending", attempts=0, max_attempts=3,
                     token=7, supervisor=None, payload=None, result=None, error=None,
                     created_at=90.0, started_at=None, finished_at=None,
                     reserved_for="b", reserved_until=104.5, moved_from="a")


def snapshot() -> PoolSnapshot:
    return PoolSnapshot(
        pool="p", store_time=100.0,
        supervisors=(member("a", 4, 3), member("b", 4, 0, inbound=1),
                     member("c", 4, 2, state="draining")),
        counts={"pending": 1, "running": 5}, running=(), store=StoreHealth(state="ok", since=1.0),
        moving=(moving_job(),),
    )


def test_status_shows_each_members_share_and_the_jobs_on_their_way() -> None:
    status = render_status_json(snapshot())
    assert {s["id"]: s["share"] for s in status["supervisors"]} == {"a": 2, "b": 2, "c": None}
    assert status["moving"] == [{"key": "k1", "handler": "long", "from": "a", "to": "b",
                                 "reserved_remaining": 4.5}]
    text = render_status_text(status)
    assert "SHARE" in text and "MOVING" in text
    assert any(line.split()[:4] == ["k1", "long", "a", "b"] for line in text.splitlines())


def test_status_shows_the_sentinel_master_and_the_lock_delay() -> None:
    held = dataclasses.replace(snapshot(), store=StoreHealth(
        state="ok", since=1.0, master="10.0.0.2:6379", hold_until=107.25))
    status = render_status_json(held)
    assert status["store"]["master"] == "10.0.0.2:6379"
    assert status["store"]["failover_hold_until"] == 107.25
    text = render_status_text(status)
    assert "store master: 10.0.0.2:6379" in text
    assert "store master changed: no job starts for 7.2 s more (lock-delay)" in text
    plain = render_status_json(snapshot())
    assert plain["store"]["master"] is None and plain["store"]["failover_hold_until"] is None
    assert "store master" not in render_status_text(plain)
