"""A schedule that ends itself, from outside: real supervisors on each store run its
producer in a real child; once a plan says "end_schedule" (or the producer raises
sandbox.EndSchedule) no supervisor fires it again, `poolsup schedules` shows it ended,
and a change of its definition in pool.toml starts it again."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

from tests.helpers.pool import HANDLERS_DIR, wait_for
from tests.integration.conftest import Pool
from tests.integration.test_schedules import HANDLERS, poolsup, schedule, with_schedules

QUIET = 3.0  # seconds of every = 1 in which an ended schedule must not fire


def feeds(plan_file: Path, *, version: int = 1) -> str:
    return f"""
[schedules.feeds]
every = 1
producer = "{HANDLERS_DIR / 'schedules.py'}:from_file"
payload = {{plan_file = "{plan_file}", version = {version}}}
"""


def ended(client: Any, name: str, after: float | None = None) -> dict[str, Any] | None:
    view = schedule(client, name)
    if view.get("state") != "ended":
        return None
    return view if after is None or view["ended_tick"] > after else None


def assert_fires_no_more(client: Any, name: str) -> dict[str, Any]:
    before = schedule(client, name)
    time.sleep(QUIET)
    after = schedule(client, name)
    assert (after["fires"], after["last_tick"], after["state"]) == (
        before["fires"], before["last_tick"], "ended"), (before, after)
    return after


def test_a_plan_that_ends_its_schedule_stops_every_supervisor_until_it_changes(
    pool: Pool, tmp_path: Path
) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"start": [{"key": "feed-a", "handler": "follow",
                                                "payload": {}}], "end_schedule": True}))
    configs = [with_schedules(pool.config(HANDLERS, file=f"s{index}.toml", id=f"s{index}",
                                          lease_ttl=2, stop_grace=1), feeds(plan_file))
               for index in range(2)]
    supervisors = [pool.start(config) for config in configs]
    client = pool.client()

    view = wait_for(lambda: ended(client, "feeds"), 20, message="the schedule to end")

    assert client.job("feed-a")["schedule"] == "feeds"  # the rest of the plan, applied
    view = assert_fires_no_more(client, "feeds")
    assert view["ended_tick"] == view["last_tick"]
    assert view["outcome"] == "applied" and view["next_tick"] is None
    assert view["store_time"] - 30 < view["ended_at"] <= view["store_time"]
    shown = json.loads(poolsup(configs[0], "schedules", "--json").stdout)
    assert [(v["name"], v["state"], v["ended_at"], v["ended_tick"]) for v in shown] == [
        ("feeds", "ended", view["ended_at"], view["ended_tick"])]
    text = poolsup(configs[1], "schedules").stdout
    assert "ended " in text and "fires again once its definition changes" in text, text
    planned = poolsup(configs[0], "plan", "feeds", "--json")
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout)["end_schedule"] is True

    for config, supervisor in zip(configs, supervisors, strict=True):
        config.write_text(config.read_text().replace("version = 1", "version = 2"))
        supervisor.signal(signal.SIGHUP)
    for supervisor in supervisors:
        wait_for(lambda s=supervisor: "SIGHUP: handlers reloaded" in s.log(), 20,
                 message="a reload")

    again = wait_for(lambda: ended(client, "feeds", after=view["ended_tick"]), 20,
                     message="the changed schedule to fire, and end again")
    assert again["fires"] > view["fires"]
    assert_fires_no_more(client, "feeds")


def test_a_producer_that_raises_end_schedule_ends_it(pool: Pool, tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"end": True}))
    config = with_schedules(pool.config(HANDLERS, lease_ttl=2), feeds(plan_file))
    pool.start(config)
    client = pool.client()

    view = wait_for(lambda: ended(client, "feeds"), 20, message="the schedule to end")

    assert (view["outcome"], view["detail"]) == (
        "applied", {"started": 0, "kept": 0, "stopped": 0})
    assert view["ended_tick"] == view["last_tick"]
    assert_fires_no_more(client, "feeds")
    planned = poolsup(config, "plan", "feeds")
    assert planned.returncode == 0, planned.stderr
    assert "then end the schedule" in planned.stdout


def test_a_producer_that_snoozes_fails_its_tick_and_ends_nothing(
    pool: Pool, tmp_path: Path
) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"snooze": True}))
    config = with_schedules(pool.config(HANDLERS, lease_ttl=2), feeds(plan_file))
    pool.start(config)
    client = pool.client()

    view = wait_for(lambda: (v := schedule(client, "feeds"))["outcome"] == "error" and v, 20,
                    message="the tick's error")

    assert "sandbox.Snooze, which only a job's handler may" in view["detail"]["error"]
    assert view["state"] == "active" and view["ended_at"] is None
    wait_for(lambda: schedule(client, "feeds")["fires"] > view["fires"], 10,
             message="the next tick")
