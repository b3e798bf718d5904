"""Children that run several jobs of one handler, one after another
(`max_jobs_per_child`): each job still gets its own environment, sockets, limits,
fence and end, and a job that leaves its child dirty never shows it to the next.

The fork server is driven directly through its sockets (as in test_forkserver.py),
then through a real supervisor and store.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from sandbox.jobs import Jobs
from sandbox.loader import HandlerSpec
from sandbox.protocol import Exited, fence_clock
from supervisor import Client
from supervisor.forks.idle_children import IDLE_LIMIT_VARIABLE
from tests.helpers.pool import finished, wait_for
from tests.integration.conftest import Pool
from tests.integration.test_forkserver import (
    HANDLERS,
    ForkServerHarness,
    JobHandle,
    result,
    wait_until_gone,
)

REUSED = str(HANDLERS / "reused.py")


def reused(function: str, jobs: int = 3, **options: Any) -> dict[str, Any]:
    return {"path": REUSED, "function": function, "max_jobs_per_child": jobs, **options}


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServerHarness]:
    harness = ForkServerHarness({
        "identity": reused("identity"),
        "identity_once": {"path": REUSED, "function": "identity"},
        "raises": reused("raises"),
        "dirty": reused("dirty", 100),
        "dirty_in_etc": reused("dirty", 100, cwd="/etc"),
        "burn": reused("burn", 100, cpu_limit=1),
        "sleeps": reused("sleeps", 100),
        "allocates": reused("allocates", 100, memory_limit=100 << 20),
        "hoards": reused("hoards", 100, memory_limit=100 << 20),
        "unsettles": reused("unsettles", 100),
        "uses_scratch": reused("uses_scratch", 100),
        "unsettles_as_nobody": reused("unsettles", 100, user="nobody", group="nogroup",
                                      cwd="/tmp"),
    })
    yield harness
    harness.close()


def run(server: ForkServerHarness, handler: str, payload: Any = None, **start: Any
        ) -> tuple[JobHandle, dict[str, Any] | None, dict[str, Any]]:
    """Spawn a job and wait for its end: the job, its last message, its `exited` event."""
    job = server.spawn(handler, payload, **start)
    message = job.read_message()
    return job, message, server.exited(job)


AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to switch users too")


def test_a_child_runs_up_to_max_jobs_per_child_jobs_in_turn(server: ForkServerHarness) -> None:
    pids = []
    for index in range(7):
        job, message, exited = run(server, "identity", {"n": index}, key=f"id-{index}",
                                   token=100 + index, attempt=index % 2 + 1)
        assert message is not None and message["t"] == "result", message
        seen = message["value"]
        assert (seen["key"], seen["token"], seen["attempt"]) == (
            f"id-{index}", str(100 + index), str(index % 2 + 1))
        assert seen["payload"] == {"n": index}
        assert seen["pid"] == job.pid
        assert exited == {"ev": "exited", "job": job.job_id, "pid": job.pid, "code": 0,
                          "signal": None, "fenced": False,
                          "reason": None, "survivors": None, "killed_for": None}
        assert job.read_output() == ""  # the output socket was closed at the job's end
        pids.append(job.pid)
    assert pids[0] == pids[1] == pids[2] != pids[3] == pids[4] == pids[5] != pids[6]
    assert wait_until_gone(pids[0], 5)  # it ran its three and exited


def test_default_is_a_fresh_child_per_job(server: ForkServerHarness) -> None:
    first, _, _ = run(server, "identity_once")
    second, _, _ = run(server, "identity_once")
    assert first.pid != second.pid


def test_a_raising_job_fails_alone_and_the_child_runs_the_next(
    server: ForkServerHarness,
) -> None:
    failing, message, exited = run(server, "raises", key="bad")
    assert message is not None and message["t"] == "error"
    assert message["error"] == "ValueError: job bad gave up"
    assert "raise ValueError" in message["traceback"]
    assert (exited["code"], exited["signal"]) == (0, None)
    after, message, _ = run(server, "raises", key="bad-2")
    assert after.pid == failing.pid
    assert message is not None and message["error"] == "ValueError: job bad-2 gave up"


def dirty(server: ForkServerHarness, *ways: str) -> tuple[int, dict[str, Any], list[int]]:
    """Run a `dirty` job: its pid, what it saw at its start, the processes it left."""
    job, message, exited = run(server, "dirty", {"ways": list(ways)}, key=f"dirty-{job_no()}")
    assert message is not None and message["t"] == "result", message
    assert (exited["code"], exited["signal"]) == (0, None), exited
    return job.pid, message["value"]["seen"], message["value"]["left"]


_jobs = iter(range(10**6))


def job_no() -> int:
    return next(_jobs)


def test_a_changed_environment_cwd_and_signal_do_not_reach_the_next_job(
    server: ForkServerHarness,
) -> None:
    first_pid, pristine, _ = dirty(server, "environ", "cwd", "signal")
    pid, seen, _ = dirty(server)
    assert pid == first_pid  # a clean child, not a fresh one
    assert seen["leaked"] is None
    for name in ("home", "cwd", "sigusr1", "blocked", "pending", "umask", "threads",
                 "children"):
        assert seen[name] == pristine[name], name
    assert seen["key"] != pristine["key"]


def test_each_job_starts_in_its_handlers_cwd(server: ForkServerHarness) -> None:
    first, message, _ = run(server, "dirty_in_etc", {"ways": ["cwd"]})  # it goes to /
    assert message is not None and message["value"]["seen"]["cwd"] == "/etc"
    second, message, _ = run(server, "dirty_in_etc", {"ways": []})
    assert second.pid == first.pid
    assert message is not None and message["value"]["seen"]["cwd"] == "/etc"


def test_processes_a_job_left_are_gone_before_the_next_job_starts(
    server: ForkServerHarness,
) -> None:
    first_pid, _, left = dirty(server, "grandchild", "daemon")
    assert len(left) == 2
    pid, seen, _ = dirty(server)
    assert pid == first_pid
    assert seen["children"] == []
    for leftover in left:
        assert not psutil.pid_exists(leftover), leftover  # killed and reaped


def test_a_job_that_closed_its_stdio_leaves_the_next_job_working_stdio(
    server: ForkServerHarness,
) -> None:
    first_pid, pristine, _ = dirty(server, "stdio")
    job = server.spawn("dirty", {"ways": []}, key="after-stdio")
    message = job.read_message()
    assert message is not None and message["t"] == "result", message
    assert job.pid == first_pid
    assert message["value"]["seen"]["stdin"] == pristine["stdin"] == "/dev/null"
    assert job.read_output() == "started after-stdio\n"
    assert server.exited(job)["code"] == 0


def test_a_job_that_leaks_a_thread_retires_its_child(server: ForkServerHarness) -> None:
    job = server.spawn("dirty", {"ways": ["thread"]}, key="leaks-a-thread")
    message = job.read_message()
    assert message is not None and message["t"] == "result", message
    pristine = message["value"]["seen"]
    # It says why it is not reused, for the supervisor's log.
    assert job.read_message() == {"t": "retired", "reason": "its job left 1 thread(s) running"}
    assert server.exited(job)["code"] == 0
    first_pid = job.pid
    pid, seen, _ = dirty(server)
    assert pid != first_pid
    assert seen["threads"] == pristine["threads"]
    assert wait_until_gone(first_pid, 5)


def test_a_job_that_leaves_its_scratch_directory_as_it_found_it_makes_none_for_the_next(
    server: ForkServerHarness,
) -> None:
    """A job that never writes in its scratch directory costs no directory of its own:
    at its end the directory leaves its path, and the next job in the same child gets it
    under a new one. A job that changed it in any way (left a file, its mode, an
    attribute) has it removed, and the next job gets a new directory (whose inode number
    the file system may give again: what tells is that nothing of the change is left)."""

    def scratch(leave: str | None = None) -> dict[str, Any]:
        job, message, exited = run(server, "uses_scratch", {"leave": leave},
                                   key=f"scratch-{job_no()}")
        assert message is not None and message["t"] == "result", message
        assert (exited["code"], exited["signal"]) == (0, None), exited
        return {**message["value"], "pid": job.pid}

    untouched = [scratch() for _ in range(3)] + [scratch("emptied")]
    assert len({seen["pid"] for seen in untouched}) == 1  # one child
    assert len({(seen["inode"], seen["born"]) for seen in untouched}) == 1  # one directory
    assert len({seen["path"] for seen in untouched}) == 4  # its path, each job's own
    for seen in untouched:
        assert (seen["mode"], seen["entries"], seen["xattrs"]) == (0o700, [], [])
    for seen in untouched[:-1]:
        assert not os.path.exists(seen["path"])
    for leave in ("file", "mode", "xattr"):
        changed = scratch(leave)
        assert changed["pid"] == untouched[0]["pid"]
        if "xattr_error" in changed:
            pytest.skip(f"no user extended attributes here: {changed['xattr_error']}")
        after = scratch()
        assert after["pid"] == changed["pid"]
        assert not os.path.exists(changed["path"]), leave
        assert (after["mode"], after["entries"], after["xattrs"]) == (0o700, [], []), leave


def unsettle(server: ForkServerHarness, handler: str, way: str
             ) -> tuple[int, dict[str, Any], int, dict[str, Any]]:
    """Run an `unsettles` job that changes its process in `way`, then a job that changes
    nothing: each one's pid and the process state it found at its start."""
    first, message, exited = run(server, handler, {"ways": [way]}, key=f"{way}-{job_no()}")
    assert message is not None and message["t"] == "result", message
    assert (exited["code"], exited["signal"]) == (0, None), exited
    changed = message["value"]
    assert changed["now"] != changed["seen"], way  # the job did change its process
    after, message, exited = run(server, handler, {"ways": []}, key=f"after-{job_no()}")
    assert message is not None and message["t"] == "result", message
    assert (exited["code"], exited["signal"]) == (0, None), exited
    return first.pid, changed["seen"], after.pid, message["value"]["seen"]


WAYS = ["nice_up", "nice_down", "scheduler", "affinity", "rlimit_soft", "rlimit_hard",
        "rt_signal"]
CAP_SYS_NICE, CAP_SYS_RESOURCE = 23, 24
# What a child needs to put back what its job changed that way (lower its nice again,
# leave SCHED_IDLE, raise a hard limit); the rest any process can put back.
NEEDS = {"nice_up": CAP_SYS_NICE, "scheduler": CAP_SYS_NICE, "rlimit_hard": CAP_SYS_RESOURCE}


def has_capability(bit: int) -> bool:
    """Whether this process has it (a container's root may lack some), as the fork
    server's children that stay root do."""
    status = Path("/proc/self/status").read_text()
    effective = int(status.split("CapEff:")[1].split()[0], 16)
    return bool(effective >> bit & 1)


def restorable(way: str, *, privileged: bool) -> bool:
    needs = NEEDS.get(way)
    return needs is None or (privileged and has_capability(needs))


@AS_ROOT
@pytest.mark.parametrize(("handler", "way"), [
    *(("unsettles", way) for way in WAYS),
    *(("unsettles_as_nobody", way) for way in WAYS if way != "nice_down"),  # not allowed
])
def test_what_a_job_changed_in_its_process_is_put_back_or_its_child_retired(
    server: ForkServerHarness, handler: str, way: str
) -> None:
    """Nice, scheduling policy, CPU affinity, resource limits (soft and hard) and queued
    real-time signals: the next job finds each as the first job did, in the same child if
    it could put it back, else in a fresh one (root puts back all, unless a capability
    is missing; nobody cannot lower its nice, leave SCHED_IDLE or raise a hard limit)."""
    if way == "affinity" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: no other affinity to set")
    first_pid, pristine, pid, seen = unsettle(server, handler, way)
    reused = restorable(way, privileged=handler == "unsettles")
    assert (pid == first_pid) is reused
    assert seen == {**pristine, "pid": pid}
    if not reused:
        assert wait_until_gone(first_pid, 5)


def test_a_fenced_job_kills_its_child_and_the_next_job_gets_a_new_one(
    server: ForkServerHarness,
) -> None:
    before, _, _ = run(server, "sleeps", {"seconds": 0})
    job = server.spawn("sleeps", {"seconds": 30}, fence_in=None)
    assert job.pid == before.pid
    server.fence(job, fence_clock() + 0.3)
    exited = server.exited(job)
    assert exited["fenced"] is True
    assert exited["signal"] == 9
    after, _, _ = run(server, "sleeps", {"seconds": 0})
    assert after.pid != job.pid


@pytest.mark.parametrize("fence_in", [0.5, -1.0])  # ahead; passed already
def test_a_job_started_on_a_reused_childs_channel_is_fenced_by_its_assignment_alone(
    server: ForkServerHarness, fence_in: float
) -> None:
    """A supervisor frozen right after it wrote a reused child's start: the assignment
    it wrote before is all the fork server gets (no fence moves, no kill), and the fork
    server kills the child when that fence passes (at once, if it had passed)."""
    before, _, _ = run(server, "sleeps", {"seconds": 0})
    started = time.monotonic()
    job = server.spawn("sleeps", {"seconds": 30}, fence_in=fence_in)  # assign, start
    assert job.pid == before.pid
    exited = server.exited(job)
    took = time.monotonic() - started
    assert (exited["fenced"], exited["signal"]) == (True, 9), exited
    assert max(0.0, fence_in) - 0.05 < took < max(0.0, fence_in) + 2, took
    assert wait_until_gone(job.pid, 5)


def test_a_stopped_job_ends_its_child(server: ForkServerHarness) -> None:
    before, _, _ = run(server, "sleeps", {"seconds": 0})
    job = server.spawn("sleeps", {"seconds": 30})
    assert job.pid == before.pid
    server.send({"op": "signal", "job": job.job_id, "signal": 15})
    exited = server.exited(job)
    assert exited["code"] == 143
    after, _, _ = run(server, "sleeps", {"seconds": 0})
    assert after.pid != job.pid


def test_cpu_limit_counts_from_each_jobs_start(server: ForkServerHarness) -> None:
    pids = set()
    for _ in range(2):  # each 60% of the 1 s limit: 1.2 s in all, in one child
        job, message, exited = run(server, "burn", {"seconds": 0.6})
        assert message is not None and message["t"] == "result", (message, exited)
        assert exited["reason"] is None and exited["signal"] is None, exited
        pids.add(job.pid)
    assert len(pids) == 1
    assert message["value"]["cpu"] >= 1.2
    # Past its own limit a job is still killed, in the same child.
    job, _, exited = run(server, "burn", {"seconds": 5})
    assert job.pid in pids
    assert exited["reason"] == "cpu limit 1 s exceeded"


def test_a_memory_limit_kill_ends_that_job_only(server: ForkServerHarness) -> None:
    before, _, _ = run(server, "allocates", {"mib": 1})
    job, _, exited = run(server, "allocates", {"mib": 300})
    assert job.pid == before.pid
    assert exited["reason"].startswith("memory limit 100 MiB exceeded")
    after, message, exited = run(server, "allocates", {"mib": 1})
    assert message == result({"pid": after.pid, "held": 1})
    assert after.pid != job.pid


def test_a_child_grown_past_75_percent_of_its_memory_limit_is_retired(
    server: ForkServerHarness,
) -> None:
    small, _, _ = run(server, "hoards", {"mib": 1})
    same, _, _ = run(server, "hoards", {"mib": 1})
    assert same.pid == small.pid
    grown, message, exited = run(server, "hoards", {"mib": 70})
    assert grown.pid == small.pid
    assert message == result({"pid": grown.pid}) and exited["reason"] is None
    after, _, _ = run(server, "hoards", {"mib": 1})
    assert after.pid != grown.pid


def test_idle_children_go_with_the_fork_server() -> None:
    harness = ForkServerHarness({"identity": reused("identity")})
    try:
        job, _, _ = run(harness, "identity")
        assert psutil.pid_exists(job.pid)
    finally:
        harness.close()
    assert wait_until_gone(job.pid, 5)


IDLE_LIMIT = 1.0  # seconds; the supervisor's is a minute (`idle_children.IDLE_LIMIT`)


def test_a_retired_idle_child_exits_and_the_next_job_gets_a_fresh_one() -> None:
    """The supervisor retires a child idle too long by closing its channel: it exits,
    the fork server says nothing of it, and the next job gets a fresh child."""
    harness = ForkServerHarness({"identity": reused("identity", 100)})
    try:
        first, _, _ = run(harness, "identity")
        again, _, _ = run(harness, "identity")
        assert again.pid == first.pid
        retired = harness.idle["identity"].pop()
        retired.close()
        assert wait_until_gone(first.pid, 5)
        after, message, exited = run(harness, "identity")
        assert after.pid != first.pid
        assert message is not None and message["t"] == "result", message
        assert (exited["code"], exited["signal"]) == (0, None)
        harness.send({"op": "ping", "seq": 1})
        harness.next_event(lambda event: event["ev"] == "pong")
        assert harness._unmatched == []  # no event about the retired child
    finally:
        harness.close()
    assert harness.process.returncode == 0


def test_jobs_of_another_handler_never_get_a_used_child(server: ForkServerHarness) -> None:
    used, _, _ = run(server, "identity")
    other, _, _ = run(server, "sleeps", {"seconds": 0})
    assert other.pid != used.pid


# -- through a real supervisor and store

POOL_HANDLERS: dict[str, dict[str, Any]] = {
    "identity": {"path": "reused.py", "function": "identity", "max_jobs_per_child": 3},
    "raises": {"path": "reused.py", "function": "raises", "max_jobs_per_child": 3,
               "max_attempts": 1},
    "sleeps": {"path": "reused.py", "function": "sleeps", "max_jobs_per_child": 100,
               "timeout": 0},
    "waits": {"path": "reused.py", "function": "waits_for_stop", "max_jobs_per_child": 100,
              "timeout": 0},
    "timed": {"path": "reused.py", "function": "sleeps", "max_jobs_per_child": 100,
              "timeout": 1, "max_attempts": 1},
    "allocates": {"path": "reused.py", "function": "allocates", "max_jobs_per_child": 100,
                  "memory_limit": "100MiB", "max_attempts": 1},
    "burn": {"path": "reused.py", "function": "burn", "max_jobs_per_child": 100,
             "cpu_limit": 1, "max_attempts": 1},
    "unsettles": {"path": "reused.py", "function": "unsettles", "max_jobs_per_child": 100,
                  "max_attempts": 1},
    "dirty": {"path": "reused.py", "function": "dirty", "max_jobs_per_child": 100},
    "traces": {"path": "reused.py", "function": "leaves_traces", "max_jobs_per_child": 100,
               "max_attempts": 1},
    "unsettles_as_nobody": {"path": "reused.py", "function": "unsettles",
                            "max_jobs_per_child": 100, "max_attempts": 1, "user": "nobody",
                            "group": "nogroup", "cwd": "/tmp"},
}


@pytest.fixture
def reused_pool(tmp_path: Path, redis_url: str, pool_name: str) -> Iterator[Pool]:
    """On Redis alone, to keep the suite within its time: the fork server and its
    reused children are the same whatever the store (the guarantee tests run reused
    children on Redis too)."""
    pool = Pool(tmp_path, redis_url, pool_name)
    try:
        pool.start(pool.config(POOL_HANDLERS, capacity=1, lease_ttl=2, stop_grace=1))
        yield pool
    finally:
        pool.close()


def finish(client: Client, key: str, handler: str, payload: Any = None) -> dict[str, Any]:
    client.dispatch(key, payload or {}, handler=handler)
    record: dict[str, Any] = wait_for(lambda: finished(client, key), 30, message=key)
    return record


def running_pid(client: Client, key: str) -> int:
    def pid() -> int | None:
        record = client.job(key)
        return int(record["pid"]) if record["state"] == "running" and record["pid"] else None

    found: int = wait_for(pid, 20, message=f"{key} to run")
    return found


def test_pool_seven_jobs_run_in_three_children_in_order(
    reused_pool: Pool, tmp_path: Path
) -> None:
    client = reused_pool.client()
    keys = [f"seven-{index}" for index in range(7)]
    for index, key in enumerate(keys):
        client.dispatch(key, {"n": index}, handler="identity")
    records = [wait_for(lambda key=key: finished(client, key), 30, message=key) for key in keys]
    assert [record["state"] for record in records] == ["succeeded"] * 7, records
    assert sorted(records, key=lambda record: record["started_at"]) == records  # in order
    for index, record in enumerate(records):
        seen = record["result"]
        assert (seen["key"], seen["token"], seen["attempt"]) == (
            keys[index], str(record["token"]), "1")
        assert seen["payload"] == {"n": index}
    pids = [record["result"]["pid"] for record in records]
    assert len(set(pids)) <= 3
    assert pids[0] == pids[1] == pids[2] != pids[3] == pids[4] == pids[5] != pids[6]

    pids_file = tmp_path / "raises.pids"
    failures = [finish(client, f"bad-{index}", "raises", {"pids": str(pids_file)})
                for index in range(2)]
    for index, record in enumerate(failures):
        assert record["state"] == "failed", record
        assert record["error"].startswith(f"ValueError: job bad-{index} gave up\n"), record
        assert "raise ValueError" in record["error"]
    assert len(set(pids_file.read_text().split())) == 1


def test_pool_a_child_that_says_done_before_its_fork_server_reports_it_is_reused(
    tmp_path: Path, redis_url: str, pool_name: str
) -> None:
    """A fresh child's first job can be over ("done" on its channel) before the
    supervisor reads the fork server's report of the child (its pid): the child is kept
    for its next job all the same, and no fork server death is told of. One chance of
    the race per child: 30 children, dispatched ahead, with a no-op handler."""
    pool = Pool(tmp_path, redis_url, pool_name)
    try:
        handlers = {"identity": {**POOL_HANDLERS["identity"], "max_jobs_per_child": 2}}
        pool.start(pool.config(handlers, capacity=1, lease_ttl=5))
        client = pool.client()
        keys = [f"pair-{index}" for index in range(60)]
        for key in keys:
            client.dispatch(key, {}, handler="identity")
        records = [wait_for(lambda key=key: finished(client, key), 60, message=key)
                   for key in keys]
        assert all(record["state"] == "succeeded" for record in records), records
        records.sort(key=lambda record: record["started_at"])
        pids = [record["result"]["pid"] for record in records]
        assert pids[0::2] == pids[1::2], pids
        assert "WARNING" not in pool.logs(), pool.logs()
    finally:
        pool.close()


def test_pool_the_next_job_in_a_reused_child_cannot_read_the_earlier_ones_scratch_or_notes(
    reused_pool: Pool,
) -> None:
    client = reused_pool.client()
    client.dispatch("trace-1", {"secret": "of trace-1"}, handler="traces")
    running_pid(client, "trace-1")
    client.notify("trace-1", {"n": 1})
    client.notify("trace-1", {"n": 2})  # left unread in the child
    first = wait_for(lambda: finished(client, "trace-1"), 30, message="trace-1")
    assert first["state"] == "succeeded", first
    assert first["result"]["note"] == {"n": 1}
    earlier = first["result"]["scratch"]
    second = finish(client, "trace-2", "traces", {"earlier": earlier})
    assert second["state"] == "succeeded", second
    seen = second["result"]
    assert seen["pid"] == first["result"]["pid"]  # the same child
    assert seen["scratch"] != earlier
    assert (seen["secret"], seen["earlier_exists"], seen["note"]) == (None, False, None), seen


def test_pool_notes_left_on_a_reused_childs_channel_never_reach_its_next_job(
    reused_pool: Pool,
) -> None:
    """Notes the first job never read stay on the child's channel after its "done": the
    next job in the same child starts without them (the child takes nothing before its
    start)."""
    client = reused_pool.client()
    client.dispatch("unread-1", {"secret": "s", "unread": 2}, handler="traces")
    running_pid(client, "unread-1")
    client.notify("unread-1", {"n": 1})
    client.notify("unread-1", {"n": 2})
    first = wait_for(lambda: finished(client, "unread-1"), 30, message="unread-1")
    assert first["state"] == "succeeded", first
    second = finish(client, "unread-2", "traces", {"earlier": first["result"]["scratch"]})
    assert second["state"] == "succeeded", second
    assert second["result"]["pid"] == first["result"]["pid"]  # the same child
    assert second["result"]["note"] is None, second


@pytest.mark.parametrize("handler", ["sleeps", "waits"])  # stop-unaware, stop-aware
def test_pool_a_stopped_job_ends_stopped_and_its_child_is_not_reused(
    reused_pool: Pool, handler: str
) -> None:
    client = reused_pool.client()
    first = finish(client, "warm", handler, {"seconds": 0})["result"]["pid"]
    client.dispatch("long", {"seconds": 60}, handler=handler)
    assert running_pid(client, "long") == first
    client.stop("long", timeout=20)
    record = wait_for(lambda: finished(client, "long"), 20, message="long to stop")
    assert record["state"] == "stopped", record
    assert wait_until_gone(first, 5)
    after = finish(client, "after", handler, {"seconds": 0})
    assert after["state"] == "succeeded" and after["result"]["pid"] != first


def test_pool_a_timeout_ends_that_job_only(reused_pool: Pool, tmp_path: Path) -> None:
    client = reused_pool.client()
    first = finish(client, "t-warm", "timed", {"seconds": 0})["result"]["pid"]
    pids = tmp_path / "timed.pids"
    record = finish(client, "t-long", "timed", {"seconds": 30, "pids": str(pids)})
    assert record["state"] == "failed" and record["error"].startswith("timeout after 1 s")
    assert pids.read_text().split() == [str(first)]
    after = finish(client, "t-after", "timed", {"seconds": 0})
    assert after["state"] == "succeeded" and after["result"]["pid"] != first


def test_pool_a_memory_limit_kill_ends_that_job_only(reused_pool: Pool, tmp_path: Path) -> None:
    client = reused_pool.client()
    first = finish(client, "m-warm", "allocates", {"mib": 1})["result"]["pid"]
    pids = tmp_path / "big.pids"
    record = finish(client, "m-big", "allocates", {"mib": 300, "pids": str(pids)})
    assert record["state"] == "failed", record
    assert record["error"].startswith("memory limit 100 MiB exceeded"), record
    assert pids.read_text().split() == [str(first)]
    after = finish(client, "m-after", "allocates", {"mib": 1})
    assert after["state"] == "succeeded" and after["result"]["pid"] != first


def test_pool_cpu_limit_counts_per_job_in_one_child(reused_pool: Pool) -> None:
    client = reused_pool.client()
    records = [finish(client, f"cpu-{index}", "burn", {"seconds": 0.6}) for index in range(2)]
    assert [record["state"] for record in records] == ["succeeded"] * 2, records
    assert records[0]["result"]["pid"] == records[1]["result"]["pid"]
    assert records[1]["result"]["cpu"] >= 1.2  # more than the limit, in one process


def test_pool_a_fenced_job_kills_its_child_and_the_next_job_gets_a_new_one(
    reused_pool: Pool,
) -> None:
    client = reused_pool.client()
    first = finish(client, "f-warm", "sleeps", {"seconds": 0})["result"]["pid"]
    client.dispatch("f-long", {"seconds": 60}, handler="sleeps")
    assert running_pid(client, "f-long") == first
    supervisor = reused_pool.supervisors[0]
    frozen_at = time.monotonic()
    supervisor.signal(signal.SIGSTOP)  # no renewals: the fork server fences the job
    try:
        assert wait_until_gone(first, 2 + 3)
        killed_after = time.monotonic() - frozen_at
    finally:
        supervisor.signal(signal.SIGCONT)
    assert killed_after < 2 + 1, killed_after  # lease_ttl 2
    client.stop("f-long", timeout=20)  # it may have been claimed again meanwhile
    after = finish(client, "f-after", "sleeps", {"seconds": 0})
    assert after["state"] == "succeeded" and after["result"]["pid"] != first


def test_pool_a_supervisor_frozen_as_its_reused_child_starts_a_job_leaves_it_fenced(
    reused_pool: Pool, tmp_path: Path
) -> None:
    """The supervisor is SIGSTOPped as soon as the job's handler starts in a reused
    child, before a renewal could move the job's fence: the fence the assignment carried
    is the one that holds, and the fork server kills the child within the lease."""
    client = reused_pool.client()
    first = finish(client, "z-warm", "sleeps", {"seconds": 0})["result"]["pid"]
    pids = tmp_path / "frozen.pids"
    client.dispatch("z-long", {"seconds": 60, "pids": str(pids)}, handler="sleeps")
    supervisor = reused_pool.supervisors[0]
    deadline = time.monotonic() + 20
    while not pids.exists() or not pids.read_text().strip():
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.001)
    supervisor.signal(signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        assert pids.read_text().split() == [str(first)]  # in the reused child
        assert wait_until_gone(first, 2 + 3)
        killed_after = time.monotonic() - frozen_at
    finally:
        supervisor.signal(signal.SIGCONT)
    assert killed_after < 2 + 1, killed_after  # lease_ttl 2
    client.stop("z-long", timeout=20)  # it may have been claimed again meanwhile


@AS_ROOT
@pytest.mark.parametrize("handler", ["unsettles", "unsettles_as_nobody"])
def test_pool_what_a_job_changed_in_its_process_never_reaches_the_next(
    reused_pool: Pool, handler: str
) -> None:
    """Several at once: as root, what root can put back (the same child runs the next
    job); as nobody, with a raised nice and a lowered hard limit (a fresh one does)."""
    client = reused_pool.client()
    privileged = handler == "unsettles"
    if privileged:
        ways = ["nice_up", "scheduler", "affinity", "rlimit_soft", "rt_signal"]
    else:
        ways = ["nice_up", "affinity", "rlimit_soft", "rlimit_hard"]
    reused = all(restorable(way, privileged=privileged) for way in ways)
    first = finish(client, "unsettles", handler, {"ways": ways})
    assert first["state"] == "succeeded", first
    assert first["result"]["now"] != first["result"]["seen"]
    after = finish(client, "after", handler, {"ways": []})
    assert after["state"] == "succeeded", after
    pristine, seen = first["result"]["seen"], after["result"]["seen"]
    assert (seen["pid"] == pristine["pid"]) is reused
    assert seen == {**pristine, "pid": seen["pid"]}


def test_pool_a_child_not_reused_after_a_job_that_went_well_is_logged_with_why(
    reused_pool: Pool,
) -> None:
    client = reused_pool.client()
    first = finish(client, "leaks-a-thread", "dirty", {"ways": ["thread"]})
    assert first["state"] == "succeeded", first
    after = finish(client, "after-the-thread", "dirty", {"ways": []})
    assert after["result"]["seen"]["pid"] != first["result"]["seen"]["pid"]
    assert (f"its child (pid {first['result']['seen']['pid']}) is not reused: its job left "
            "1 thread(s) running") in reused_pool.logs()


def test_pool_a_child_idle_past_the_limit_is_retired_and_fails_nothing(
    tmp_path: Path, redis_url: str, pool_name: str
) -> None:
    pool = Pool(tmp_path, redis_url, pool_name)
    try:
        handlers = {"identity": {**POOL_HANDLERS["identity"], "max_jobs_per_child": 100,
                                 "inherit_env": True}}  # so that the limit reaches it
        pool.start(pool.config(handlers, capacity=1, lease_ttl=2),
                   env={IDLE_LIMIT_VARIABLE: str(IDLE_LIMIT)})
        client = pool.client()
        first = finish(client, "before-idle", "identity")
        assert first["state"] == "succeeded", first
        assert wait_until_gone(first["result"]["pid"], IDLE_LIMIT + 5)
        after = finish(client, "after-idle", "identity")
        assert after["state"] == "succeeded", after
        assert after["result"]["pid"] != first["result"]["pid"]
        assert (first["attempts"], after["attempts"]) == (1, 1), (first, after)
        # The lines themselves in the message: the whole log is cut in a run's report.
        warned = [line for line in pool.logs().splitlines()
                  if " WARNING " in line or " ERROR " in line]
        assert not warned, warned
    finally:
        pool.close()


# -- the fork server's per-job bookkeeping


@pytest.mark.parametrize("action", ["signal", "kill", "fence", "none"])
def test_a_job_ended_by_the_fork_server_never_hands_its_child_back(action: str) -> None:
    """`done` racing a stop, a kill or a fence: the job is not reported ended by it
    (fence), or its child is not reused (signal, kill)."""
    jobs = Jobs()
    with subprocess.Popen(["sleep", "30"], start_new_session=True) as process:
        job = jobs.add("j1", process.pid, HandlerSpec(path=REUSED, max_jobs_per_child=2), 0.0)
        if action == "signal":
            jobs.signal("j1", signal.SIGCONT)
        elif action == "kill":
            jobs.kill("j1")
        elif action == "fence":
            jobs.set_fence("j1", 1.0)
            jobs.enforce_fences(2.0)
        event = jobs.finish("j1")
        process.kill()
    if action == "fence":
        assert event is None and "j1" in jobs
        return
    assert event == Exited(job="j1", pid=process.pid, code=0, signal=None, fenced=False)
    assert "j1" not in jobs
    assert job.signalled is (action != "none")
