"""The promise at its edges, on Redis and SQLite (notes across a drain on PostgreSQL too):
backlogs, failed spawns, reloads that fail, notes across a drain, results over the
limit, a child that breaks the protocol, a stalled log reader, and membership after a
freeze."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from redis import Redis

from supervisor import Client
from supervisor.errors import InvalidJob
from tests.helpers.pool import HANDLERS_DIR, finished, wait_for
from tests.integration.conftest import Pool

EDGES = str(HANDLERS_DIR / "edges.py")


def edges(function: str, **options: object) -> dict[str, dict[str, object]]:
    return {function: {"path": EDGES, "function": function, **options}}


def fork_server_of(pid: int) -> psutil.Process:
    (server,) = [p for p in psutil.Process(pid).children()
                 if "sandbox.forkserver" in " ".join(p.cmdline())]
    return server


def test_guarantee_2_a_backlog_of_one_handler_does_not_delay_another(pool: Pool) -> None:
    client = pool.client()
    for index in range(1000):
        client.dispatch(f"other-{index}", None, handler="nobody-runs-this")
    pool.start(pool.config(edges("sleeps"), capacity=2))
    client.dispatch("mine", {"seconds": 0}, handler="sleeps")
    record = wait_for(lambda: finished(client, "mine"), 5, message="mine to run")
    assert record["state"] == "succeeded"


@pytest.mark.parametrize("jobs_per_child", [1, 100])
def test_a_payload_larger_than_a_socket_buffer_reaches_the_handler_whole(
    pool: Pool, jobs_per_child: int
) -> None:
    pool.start(pool.config(edges("payload_size", max_jobs_per_child=jobs_per_child)))
    client = pool.client()
    size = 1_000_000  # under the 1 MiB limit, over an AF_UNIX socket's buffer
    for key in ("big-1", "big-2"):
        client.dispatch(key, {"text": "x" * size}, handler="payload_size")
    for key in ("big-1", "big-2"):
        record = wait_for(lambda key=key: finished(client, key), 30, message=key)
        assert (record["state"], record["result"]) == ("succeeded", size), record


def test_a_failed_spawn_backs_off_instead_of_looping(pool: Pool) -> None:
    supervisor = pool.start(pool.config(edges("sleeps"), capacity=2))
    client = pool.client()
    os.kill(fork_server_of(supervisor.pid).pid, signal.SIGKILL)
    client.dispatch("during", {"seconds": 0}, handler="sleeps")
    record = wait_for(lambda: finished(client, "during"), 30, message="the job to run")
    assert record["state"] == "succeeded", record
    assert supervisor.log().count("released") <= 2, supervisor.log()
    assert record["token"] <= 3, record


def test_sighup_keeps_serving_when_the_new_fork_server_dies_at_import(
    pool: Pool, tmp_path: Path
) -> None:
    config = pool.config(edges("version"))
    supervisor = pool.start(config)
    config.write_text(config.read_text() + (
        f'\n[handlers.killer]\npath = "{HANDLERS_DIR / "exits_at_import.py"}"\n'))
    supervisor.signal(signal.SIGHUP)
    wait_for(lambda: "handlers not reloaded" in supervisor.log(), 30, message="refused reload")
    client = pool.client()
    client.dispatch("still", None, handler="version")
    assert wait_for(lambda: finished(client, "still"), 20)["result"] == "v1"
    assert supervisor.process.poll() is None


def test_guarantee_2_notes_not_taken_before_a_drain_reach_the_next_run(
    pool: Pool, tmp_path: Path
) -> None:
    marker = tmp_path / "first-run-took.txt"
    handler = edges("notes_once", timeout=0)
    first = pool.start(pool.config(handler, file="a.toml", id="a", drain_timeout=0.5,
                                   stop_grace=1))
    client = pool.client()
    client.dispatch("n", {"marker": str(marker)}, handler="notes_once")
    wait_for(lambda: client.job("n")["state"] == "running", 20, message="job to run")
    for index in (1, 2, 3):
        client.notify("n", {"note": index})
    wait_for(marker.exists, 20, message="the first run to take a note")
    first.signal(signal.SIGTERM)
    assert first.wait(30) == 0, first.log()
    assert marker.read_text() == "{'note': 1}"
    pool.start(pool.config(handler, file="b.toml", id="b"))
    record = wait_for(lambda: finished(client, "n"), 30, message="the second run")
    assert record["state"] == "succeeded", record
    assert record["result"] == [{"note": 2}, {"note": 3}], record
    assert record["attempts"] == 1, record


def test_guarantee_2_a_note_taken_while_the_store_refused_its_ack_is_not_sent_again(
    tmp_path: Path, own_redis, pool_name: str  # type: ignore[no-untyped-def]
) -> None:
    """The acknowledgement's own retries back off past the job's end (Redis refuses
    writes for a while); only the flush at the end can remove the note taken."""
    marker, cue = tmp_path / "first-run-took.txt", tmp_path / "cue"
    pool = Pool(tmp_path, own_redis.url, pool_name)
    redis = Redis.from_url(own_redis.url)
    try:
        handler = edges("notes_on_cue", timeout=0)
        first = pool.start(pool.config(handler, file="a.toml", id="a", drain_timeout=0.5,
                                       stop_grace=1))
        client = pool.client()
        client.dispatch("n", {"marker": str(marker), "cue": str(cue)}, handler="notes_on_cue")
        wait_for(lambda: client.job("n")["state"] == "running", 20, message="job to run")
        for index in (1, 2, 3):
            client.notify("n", {"note": index})
        time.sleep(1)  # the notes reach the child, which holds them until its cue
        redis.config_set("min-replicas-to-write", 1)  # every write refused: NOREPLICAS
        try:
            cue.touch()
            wait_for(marker.exists, 20, message="the first run to take a note")
            # Refused again and again, the acknowledgement's retries back off: 0.1 s
            # doubling, so after 3.5 s the next one is more than 2.5 s away.
            time.sleep(3.5)
        finally:
            redis.config_set("min-replicas-to-write", 0)
        first.signal(signal.SIGTERM)
        assert first.wait(30) == 0, first.log()
        assert marker.read_text() == "{'note': 1}"
        pool.start(pool.config(handler, file="b.toml", id="b"))
        record = wait_for(lambda: finished(client, "n"), 30, message="the second run")
        assert record["result"] == [{"note": 2}, {"note": 3}], record
    finally:
        redis.close()
        pool.close()


def test_guarantee_8_a_result_over_max_result_fails_the_attempt(pool: Pool) -> None:
    config = pool.config(edges("big_result", max_attempts=1))
    config.write_text(config.read_text().replace("[pool]\n", "[pool]\nmax_result = 1024\n"))
    supervisor = pool.start(config)
    client = pool.client()
    client.dispatch("small", {"bytes": 100}, handler="big_result")
    client.dispatch("big", {"bytes": 5000}, handler="big_result")
    assert wait_for(lambda: finished(client, "small"), 20)["state"] == "succeeded"
    record = wait_for(lambda: finished(client, "big"), 20)
    assert record["state"] == "failed", record
    assert record["error"].startswith("result is 5002 bytes, above max_result (1024 bytes)")
    assert supervisor.process.poll() is None


def test_guarantee_8_a_child_that_writes_garbage_on_its_control_socket(pool: Pool) -> None:
    supervisor = pool.start(pool.config(edges("garbage_on_control", max_attempts=1)))
    client = pool.client()
    client.dispatch("garbage", None, handler="garbage_on_control")
    record = wait_for(lambda: finished(client, "garbage"), 20)
    assert record["state"] == "failed", record
    assert record["error"].startswith("the child sent an invalid control message"), record
    client.dispatch("after", None, handler="garbage_on_control")
    assert wait_for(lambda: finished(client, "after"), 20)["state"] == "failed"
    assert supervisor.process.poll() is None


def test_guarantee_1_a_stalled_log_reader_does_not_stop_renewals(
    pool: Pool, tmp_path: Path
) -> None:
    config = pool.config(edges("chatty", timeout=0), lease_ttl=2)
    process = subprocess.Popen(  # stderr is a pipe that nobody reads for a while
        [sys.executable, "-m", "supervisor.cli", "run", "-c", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    try:
        client = pool.client()
        client.dispatch("chatty", {"seconds": 8}, handler="chatty")
        time.sleep(8)
        record = wait_for(lambda: finished(client, "chatty"), 30, message="the chatty job")
        assert record["state"] == "succeeded", record
        assert record["attempts"] == 1 and record["lease_losses"] == 0, record
    finally:
        process.kill()
        process.communicate(timeout=30)


def test_guarantee_8_a_configless_client_refuses_invalid_json(pool: Pool) -> None:
    client = Client(pool.store, pool=pool.name)
    try:
        with pytest.raises(InvalidJob, match="not valid JSON"):
            client._call(client._async.dispatch_json, "bad", b"{not json", handler="h")
        with pytest.raises(InvalidJob, match="not valid JSON"):
            client._call(client._async.notify_json, "bad", b"\xff")
    finally:
        client.close()


def test_a_frozen_supervisor_comes_back_into_membership(pool: Pool) -> None:
    lease_ttl = 1
    supervisor = pool.start(pool.config(edges("sleeps"), id="a", lease_ttl=lease_ttl))
    client = pool.client()
    supervisor.signal(signal.SIGSTOP)
    try:
        time.sleep(4 * lease_ttl)
        assert [s["id"] for s in client.status()["supervisors"]] == []
    finally:
        supervisor.signal(signal.SIGCONT)
    wait_for(lambda: [s["id"] for s in client.status()["supervisors"]] == ["a"], 10,
             message="a to be listed again")
    time.sleep(2 * lease_ttl)
    assert [s["id"] for s in client.status()["supervisors"]] == ["a"]


def test_a_supervisor_whose_id_was_taken_drains(pool: Pool) -> None:
    lease_ttl = 1
    config = pool.config(edges("sleeps"), id="same", lease_ttl=lease_ttl)
    old = pool.start(config)
    old.signal(signal.SIGSTOP)
    try:
        time.sleep(lease_ttl + 1)
        new = pool.start(config)
    finally:
        old.signal(signal.SIGCONT)
    assert old.wait(20) == 1, old.log()
    assert "was taken by another instance" in old.log()
    assert new.process.poll() is None
    assert [s["id"] for s in pool.client().status()["supervisors"]] == ["same"]
