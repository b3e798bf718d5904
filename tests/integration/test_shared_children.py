"""Jobs of an async handler sharing a child (child_concurrency > 1), from outside: real
supervisors, fork servers, shared children and stores; guarantee 14 and each job's own
stop, note, timeout, drain, limit, output and stacks."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import orjson
import psutil

from tests.acceptance.test_cli import poolsup
from tests.helpers.pool import (
    assert_one_process_at_a_time,
    finished,
    read_ledger,
    wait_for,
)
from tests.integration.conftest import Pool


def shared(function: str, concurrency: int = 4, **options: Any) -> dict[str, Any]:
    return {"path": "shared_async.py", "function": function, "timeout": 0,
            "child_concurrency": concurrency, **options}


def running(client: Any, keys: list[str]) -> dict[str, dict[str, Any]] | None:
    records = {key: client.job(key) for key in keys}
    if all(record["state"] == "running" and record["pid"] for record in records.values()):
        return records
    return None


def all_finished(client: Any, keys: list[str]) -> dict[str, dict[str, Any]] | None:
    records = {key: finished(client, key) for key in keys}
    return records if all(records.values()) else None  # type: ignore[return-value]


def is_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_guarantee_14_a_stubborn_task_of_a_frozen_supervisor_is_fenced_before_others_run_it(
    pool: Pool, ledger: Path
) -> None:
    lease_ttl = 2
    handlers = {"ledger": shared("ledger", max_attempts=3)}
    frozen = pool.start(pool.config(handlers, file="a.toml", id="a", capacity=4,
                                    lease_ttl=lease_ttl))
    client = pool.client()
    keys = ["st-stubborn", "st-1", "st-2"]
    for key in keys:
        client.dispatch(key, {"ledger": str(ledger), "seconds": 6,
                              "stubborn": key == "st-stubborn"}, handler="ledger")
    before = wait_for(lambda: running(client, keys), 20, message="jobs to run on a")
    (child_pid,) = {record["pid"] for record in before.values()}  # one child holds all three
    assert all(entry["shared_child"] for entry in client.status()["running"])
    pool.start(pool.config(handlers, file="b.toml", id="b", capacity=4, lease_ttl=lease_ttl))

    frozen.signal(signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        wait_for(lambda: is_gone(child_pid), lease_ttl + 3, message="the fence to kill the child")
        killed_at = time.monotonic()
        wait_for(lambda: all(client.job(key)["supervisor"] == "b" for key in keys),
                 lease_ttl + 10, message="b to take the jobs over")
        time.sleep(max(0.0, frozen_at + 2 * lease_ttl - time.monotonic()))
    finally:
        frozen.signal(signal.SIGCONT)
    records = wait_for(lambda: all_finished(client, keys), 40, message="jobs to finish")
    time.sleep(1.0)  # the thawed supervisor's chance to (wrongly) write anything
    lines = read_ledger(ledger)
    for key in keys:
        record = client.job(key)
        assert record["state"] == "succeeded", record
        assert record["supervisor"] == "b"
        assert record["token"] > before[key]["token"]
        old = [line.at for line in lines if line.key == key and line.token == before[key]["token"]]
        new = [line.at for line in lines if line.key == key and line.token == record["token"]]
        assert old and new and max(old) <= killed_at < min(new), key
    assert records
    assert_one_process_at_a_time(lines)
    assert "succeeded" not in "\n".join(
        line for line in frozen.log().splitlines() if "st-" in line
    ), "the frozen supervisor stored an outcome for a job it no longer owned"


def test_a_stop_cancels_one_task_and_its_siblings_in_the_same_child_run_on(pool: Pool) -> None:
    pool.start(pool.config({"sleeper": shared("sleeper")}, capacity=4))
    client = pool.client()
    keys = ["sib-1", "sib-2", "sib-3"]
    for key in keys:
        client.dispatch(key, {"seconds": 4}, handler="sleeper")
    before = wait_for(lambda: running(client, keys), 20, message="jobs to run")
    assert len({record["pid"] for record in before.values()}) == 1

    stopped = client.stop("sib-2", timeout=10)

    assert stopped["state"] == "stopped", stopped
    for key in ("sib-1", "sib-3"):
        assert client.job(key)["state"] == "running"
    records = wait_for(lambda: all_finished(client, ["sib-1", "sib-3"]), 20, message="the rest")
    for record in records.values():
        assert record["state"] == "succeeded", record
        assert record["result"]["pid"] == before["sib-1"]["pid"]
        assert record["attempts"] == 1


def test_a_note_reaches_its_one_job_of_a_shared_child(pool: Pool) -> None:
    pool.start(pool.config({"sleeper": shared("sleeper")}, capacity=4))
    client = pool.client()
    client.dispatch("note-to", {"seconds": 20, "notes": True}, handler="sleeper")
    client.dispatch("note-not", {"seconds": 3, "notes": True}, handler="sleeper")
    before = wait_for(lambda: running(client, ["note-to", "note-not"]), 20, message="jobs")
    assert before["note-to"]["pid"] == before["note-not"]["pid"]

    client.notify("note-to", {"hello": 1})

    records = wait_for(lambda: all_finished(client, ["note-to", "note-not"]), 20, message="end")
    assert records["note-to"]["result"]["note"] == {"hello": 1}
    assert records["note-not"]["result"]["note"] is None


def test_a_timeout_fails_one_task_of_a_shared_child(pool: Pool) -> None:
    handlers = {"slow": shared("sleeper", timeout=1), "quick": shared("sleeper")}
    pool.start(pool.config(handlers, capacity=4))
    client = pool.client()
    client.dispatch("to-slow", {"seconds": 30}, handler="slow")
    client.dispatch("to-quick", {"seconds": 2}, handler="quick")

    records = wait_for(lambda: all_finished(client, ["to-slow", "to-quick"]), 30, message="end")

    assert records["to-slow"]["state"] == "failed", records["to-slow"]
    assert records["to-slow"]["error"].startswith("timeout after 1 s")
    assert records["to-quick"]["state"] == "succeeded"


def test_a_task_ignoring_its_stop_takes_its_child_after_stop_grace_the_others_released(
    pool: Pool,
) -> None:
    config = pool.config({"mixed": shared("stubborn")}, capacity=4, stop_grace=1)
    pool.start(config)
    client = pool.client()
    client.dispatch("stub-1", {}, handler="mixed")
    client.dispatch("stub-2", {}, handler="mixed")
    before = wait_for(lambda: running(client, ["stub-1", "stub-2"]), 20, message="jobs")
    child_pid = before["stub-1"]["pid"]
    assert before["stub-2"]["pid"] == child_pid

    stopped = client.stop("stub-1", timeout=15)

    assert stopped["state"] == "stopped", stopped
    assert "did not stop within stop_grace" in stopped["error"]
    wait_for(lambda: is_gone(child_pid), 5, message="the shared child to be killed")
    sibling = wait_for(lambda: (record := client.job("stub-2"))["state"] == "running"
                       and record["pid"] != child_pid and record, 20,
                       message="the sibling to run again in another child")
    assert sibling["attempts"] == 1, sibling  # released: its attempt not spent
    released = [event for event in sibling["events"] if event["event"] == "released"]
    assert released and "its shared child was killed" in str(released[-1]["detail"]), released


def test_drain_releases_the_tasks_of_a_shared_child_without_spending_attempts(pool: Pool) -> None:
    config = pool.config({"sleeper": shared("sleeper")}, capacity=4, drain_timeout=1)
    supervisor = pool.start(config)
    client = pool.client()
    keys = ["dr-1", "dr-2"]
    for key in keys:
        client.dispatch(key, {"seconds": 30}, handler="sleeper")
    wait_for(lambda: running(client, keys), 20, message="jobs")

    supervisor.signal(signal.SIGTERM)

    assert supervisor.wait(30) == 0, supervisor.log()
    for key in keys:
        record = client.job(key)
        assert record["state"] == "pending", record
        assert record["attempts"] == 0, record


def test_a_memory_limit_fails_the_job_over_it_and_releases_its_siblings(pool: Pool) -> None:
    handlers = {"hog": shared("hog", memory_limit="150MiB", max_attempts=1)}
    pool.start(pool.config(handlers, capacity=4))
    client = pool.client()
    client.dispatch("mem-calm", {"mib": 1}, handler="hog")
    wait_for(lambda: running(client, ["mem-calm"]), 20, message="the calm job")
    calm_pid = client.job("mem-calm")["pid"]
    client.dispatch("mem-hog", {"mib": 300}, handler="hog")

    hog = wait_for(lambda: finished(client, "mem-hog"), 30, message="the hog to end")

    assert hog["state"] == "failed", hog
    assert "memory limit 150 MiB exceeded" in hog["error"], hog["error"]
    calm = wait_for(lambda: (record := client.job("mem-calm"))["state"] == "running"
                    and record["pid"] != calm_pid and record, 20,
                    message="the calm job to run again")
    assert calm["attempts"] == 1, calm  # released, not failed: max_attempts = 1


def test_each_job_of_a_shared_child_keeps_its_own_output_and_stack(pool: Pool) -> None:
    handlers = {"sleeper": shared("sleeper"), "named": shared("waits_in_a_named_place")}
    config = pool.config(handlers, capacity=4)
    pool.start(config)
    client = pool.client()
    for key in ("out-a", "out-b"):
        client.dispatch(key, {"seconds": 1.5}, handler="sleeper")
    client.dispatch("stack", {}, handler="named")
    wait_for(lambda: running(client, ["stack"]), 20, message="the waiting job")

    done = poolsup("debug", "-c", str(config), "stack", "--json")

    assert done.returncode == 0, done.stderr
    frames = [frame["function"] for thread in orjson.loads(done.stdout)["threads"]
              for frame in thread["frames"]]
    assert "waits_in_a_named_place" in frames, frames
    wait_for(lambda: all_finished(client, ["out-a", "out-b"]), 20, message="the printers")
    for key, other in (("out-a", "out-b"), ("out-b", "out-a")):
        (attempt,) = client.logs(key)
        text = attempt.text
        assert f"line 1 of {key}" in text and f"logged by {key}" in text, text
        assert other not in text, text


def test_a_plain_def_handler_with_child_concurrency_is_refused(pool: Pool) -> None:
    config = pool.config({"sync": {"path": "shared_sync.py", "child_concurrency": 2}})

    checked = poolsup("check", "-c", str(config))
    started = poolsup("run", "-c", str(config))

    for done in (checked, started):
        assert done.returncode == 2, done
        assert "child_concurrency" in done.stderr and "async" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_move_takes_one_job_out_of_a_shared_child_and_leaves_its_sibling_running(
    pool: Pool, ledger: Path
) -> None:
    handlers = {"ledger": shared("ledger", rebalance=True)}
    pool.start(pool.config(handlers, file="a.toml", id="a", capacity=2, lease_ttl=2))
    client = pool.client()
    keys = ["mv-1", "mv-2"]
    for key in keys:
        client.dispatch(key, {"ledger": str(ledger), "seconds": 30}, handler="ledger")
    before = wait_for(lambda: running(client, keys), 20, message="jobs on a")
    child_pid = before["mv-1"]["pid"]
    assert before["mv-2"]["pid"] == child_pid

    pool.start(pool.config(handlers, file="b.toml", id="b", capacity=2, lease_ttl=2))

    def split() -> dict[str, str] | None:
        owners = {key: client.job(key)["supervisor"] for key in keys}
        return owners if sorted(owners.values()) == ["a", "b"] else None

    owners = wait_for(split, 40, message="one job to move to b")
    (stayed,) = [key for key, owner in owners.items() if owner == "a"]
    (moved,) = [key for key, owner in owners.items() if owner == "b"]
    records = wait_for(lambda: running(client, keys), 20, message="both running again")
    assert records[stayed]["token"] == before[stayed]["token"], "the sibling was not touched"
    assert records[stayed]["pid"] == child_pid and psutil.pid_exists(child_pid)
    assert records[moved]["token"] > before[moved]["token"]
    for record in records.values():
        assert record["attempts"] == 1, record
    moved_events = [event["event"] for event in client.job(moved)["events"]]
    assert "moved" in moved_events or "released" in moved_events, moved_events
    assert_one_process_at_a_time(read_ledger(ledger))


def test_metrics_count_a_shared_child_once(pool: Pool) -> None:
    from tests.helpers.redis_server import free_port
    from tests.integration.test_metrics import scrape, with_metrics

    port = free_port()
    pool.start(with_metrics(pool.config({"sleeper": shared("sleeper")}, capacity=4,
                                        lease_ttl=2), port))
    client = pool.client()
    keys = ["met-1", "met-2", "met-3"]
    for key in keys:
        client.dispatch(key, {"seconds": 8}, handler="sleeper")
    before = wait_for(lambda: running(client, keys), 20, message="jobs")
    (pid,) = {record["pid"] for record in before.values()}
    rss = psutil.Process(pid).memory_info().rss

    def children() -> float | None:
        found = scrape(port).get(("poolsup_running_children", ()))
        return found if found else None

    assert wait_for(children, 10, message="the children gauge") == 1
    assert scrape(port)[("poolsup_children_rss_bytes", ())] < 2 * rss


def test_a_shared_child_left_without_a_job_is_retired(pool: Pool) -> None:
    config = pool.config({"sleeper": shared("sleeper")}, capacity=4)
    pool.start(config, env={"_POOLSUP_TEST_IDLE_LIMIT": "1"})
    client = pool.client()
    client.dispatch("idle-1", {"seconds": 0.5}, handler="sleeper")
    record = wait_for(lambda: finished(client, "idle-1"), 20, message="the job")
    child_pid = record["result"]["pid"]
    assert record["state"] == "succeeded"

    wait_for(lambda: is_gone(child_pid), 10, message="the idle shared child to be retired")

    client.dispatch("idle-2", {"seconds": 0.1}, handler="sleeper")
    again = wait_for(lambda: finished(client, "idle-2"), 20, message="a job after it")
    assert again["state"] == "succeeded" and again["result"]["pid"] != child_pid
