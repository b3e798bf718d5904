"""The fork server and the job child, as real processes, driven through their sockets."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from itertools import count
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest

from sandbox import confinement, linux
from sandbox.forkserver import FORKED_AHEAD
from sandbox.loader import HandlerSpec
from sandbox.protocol import fence_clock

REPO = Path(__file__).resolve().parents[2]
HANDLERS = REPO / "tests" / "handlers"
BASIC_FUNCTIONS = [
    "echo", "async_echo", "returns_coroutine", "started_at", "environment", "process_ids",
    "raises", "async_raises", "fails", "exits", "unserializable", "prints", "sleeps", "stop_aware",
    "stop_unaware", "async_stop_unaware", "next_notification", "stopping_at_start",
    "stop_reason", "notifications_until_stop", "escaped_grandchild",
    "escaped_grandchild_then_sleep",
]
WAIT = 10.0  # generous bound for anything that should take milliseconds


def result(value: Any, *, stopping: bool = False) -> dict[str, Any]:
    """The message a child sends when its handler returns `value`."""
    return {"t": "result", "stopping": stopping, "value": value}

_job_ids = count(1)


def handler_specs() -> dict[str, dict[str, str]]:
    specs = {
        name: {"path": str(HANDLERS / "basic.py"), "function": name} for name in BASIC_FUNCTIONS
    }
    specs["broken"] = {"path": str(HANDLERS / "broken.py"), "function": "run"}
    return specs


class JobHandle:
    """The supervisor's ends of one job's control and output sockets (a reused child's
    for its life: `reused` handlers, whose jobs end with "done" there)."""

    def __init__(self, job_id: str, control: socket.socket, output: socket.socket,
                 handler: str = "", *, reused: bool = False) -> None:
        self.job_id = job_id
        self.control = control
        self.output = output
        self.handler = handler
        self.reused = reused
        self.done = False
        self._output = ""  # a reused child's job's, read at its "done"
        self.pid = 0
        self._buffer = b""
        self._read: list[dict[str, Any]] = []  # read while looking for "done"

    def send(self, message: dict[str, Any]) -> None:
        self.control.sendall(orjson.dumps(message) + b"\n")

    def read_message(self, timeout: float = WAIT) -> dict[str, Any] | None:
        """The next line from the child, or None when it closed its end."""
        if self._read:
            return self._read.pop(0)
        return self._next_line(timeout)

    def said_done(self, timeout: float) -> bool:
        """Whether the job's reused child said "done" (within `timeout`)."""
        if self.done:
            return True
        try:
            while (message := self._next_line(timeout)) is not None:
                if message == {"t": "done"}:
                    self.done = True
                    self._output = self._output_so_far()
                    return True
                self._read.append(message)
        except TimeoutError:
            pass
        return False

    def _output_so_far(self) -> str:
        """What the output socket holds now (a reused child's job's output, read at its
        "done": the next job's output comes after)."""
        self.output.settimeout(0)
        chunks = []
        with contextlib.suppress(BlockingIOError):
            while chunk := self.output.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def _next_line(self, timeout: float) -> dict[str, Any] | None:
        self.control.settimeout(timeout)
        while b"\n" not in self._buffer:
            try:
                data = self.control.recv(65536)
            except ConnectionResetError:  # it exited with our messages unread
                return None
            if not data:
                return None
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        message = orjson.loads(line)
        assert isinstance(message, dict)
        return message

    def read_output_line(self, timeout: float = WAIT) -> str:
        self.output.settimeout(timeout)
        data = b""
        while not data.endswith(b"\n"):
            chunk = self.output.recv(1)
            assert chunk, f"output closed after {data!r}"
            data += chunk
        return data.decode()

    def read_output(self, timeout: float = WAIT) -> str:
        """Everything the job wrote, up to the end of its output: the end of stream, or
        a reused child's "done" (its output was all written before)."""
        if self.reused and self.said_done(timeout):
            output, self._output = self._output, ""
            return output
        self.output.settimeout(timeout)
        chunks = []
        while chunk := self.output.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks).decode()

    def close(self) -> None:
        self.control.close()
        self.output.close()


class ForkServerHarness:
    """A fork server and the supervisor's end of its control socket.

    The handler table goes on the command line, or with `table_by_fd` in a file passed
    by descriptor, as the supervisor passes it. `wrapper` is a command that runs it
    (`unshare ...`)."""

    def __init__(
        self,
        handlers: dict[str, dict[str, Any]] | None = None,
        *,
        table_by_fd: bool = False,
        env: dict[str, str] | None = None,
        wrapper: tuple[str, ...] = (),
    ) -> None:
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        handlers = handlers or handler_specs()
        # Handlers whose children run several jobs, and those children between two jobs,
        # as the supervisor keeps them (`supervisor.forks.idle_children`).
        self.reused = {name for name, spec in handlers.items()
                       if spec.get("max_jobs_per_child", 1) > 1}
        self.idle: dict[str, list[JobHandle]] = {}
        table = orjson.dumps(handlers)
        table_fd = os.memfd_create("handlers")
        os.write(table_fd, table)
        os.lseek(table_fd, 0, os.SEEK_SET)
        table_args = ["--handlers-fd", str(table_fd)] if table_by_fd else [
            "--handlers", table.decode()
        ]
        with theirs:
            self.process = subprocess.Popen(
                [
                    *wrapper, sys.executable, "-m", "sandbox.forkserver",
                    "--control-fd", str(theirs.fileno()), *table_args,
                ],
                pass_fds=[theirs.fileno(), table_fd],
                cwd=REPO,
                env={**os.environ, **(env or {})},
            )
        os.close(table_fd)
        self._unmatched: list[dict[str, Any]] = []
        self.jobs: list[JobHandle] = []
        self.ready = self.next_event(lambda event: event["ev"] == "ready")

    def send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        socket.send_fds(self.sock, [orjson.dumps(message)], fds or [])

    def next_event(
        self, matches: Callable[[dict[str, Any]], bool], timeout: float = WAIT
    ) -> dict[str, Any]:
        for event in self._unmatched:
            if matches(event):
                self._unmatched.remove(event)
                return event
        deadline = time.monotonic() + timeout
        while True:
            self.sock.settimeout(max(0.001, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            assert data, "the fork server closed its control socket"
            event = orjson.loads(data)
            if matches(event):
                return event  # type: ignore[no-any-return]
            self._unmatched.append(event)

    def spawn(
        self,
        handler: str,
        payload: Any = None,
        *,
        key: str = "k1",
        token: int = 7,
        attempt: int = 1,
        fence_in: float | None = 60.0,
        start: bool = True,
        then_send: tuple[dict[str, Any], ...] = (),
    ) -> JobHandle:
        """Spawn a job; with `start`, its start message (and `then_send`) already sent.
        A job of a reused handler with an idle child runs in that child, as the
        supervisor starts it: the assignment to the fork server, then the start."""
        if self.idle.get(handler):
            return self.assign(self.idle[handler].pop(), payload, key=key, token=token,
                               attempt=attempt, fence_in=fence_in, start=start,
                               then_send=then_send)
        control, child_control = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        output, child_output = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        job = JobHandle(f"job-{next(_job_ids)}", control, output, handler,
                        reused=handler in self.reused)
        self.jobs.append(job)
        if start:
            self.start(job, payload, key=key, token=token, attempt=attempt)
            for message in then_send:
                job.send(message)
        with child_control, child_output:
            self.send(
                {"op": "spawn", "job": job.job_id, "handler": handler},
                [child_control.fileno(), child_output.fileno()],
            )
        if fence_in is not None:
            self.fence(job, fence_clock() + fence_in)
        spawned = self.event(job, "spawned")
        job.pid = spawned["pid"]
        return job

    def assign(
        self, idle: JobHandle, payload: Any = None, *, key: str, token: int, attempt: int,
        fence_in: float | None, start: bool, then_send: tuple[dict[str, Any], ...],
    ) -> JobHandle:
        job = JobHandle(f"job-{next(_job_ids)}", idle.control, idle.output, idle.handler,
                        reused=True)
        job.pid = idle.pid
        self.jobs.append(job)
        deadline = fence_clock() + (3600.0 if fence_in is None else fence_in)
        self.send({"op": "assign", "job": job.job_id, "pid": job.pid, "deadline": deadline})
        if start:
            try:
                self.start(job, payload, key=key, token=token, attempt=attempt)
                for message in then_send:
                    job.send(message)
            except (BrokenPipeError, ConnectionResetError):
                # The fork server killed it at the assignment (a fence already passed)
                # before the start was written: the supervisor's `_reuse` takes the same
                # error as "it died waiting"; the child's `exited` event says the rest.
                pass
        return job

    def start(
        self, job: JobHandle, payload: Any = None, *, key: str = "k1", token: int = 7,
        attempt: int = 1,
    ) -> None:
        job.send({"t": "start", "key": key, "payload": payload, "token": token,
                  "attempt": attempt})

    def fence(self, job: JobHandle, deadline: float) -> None:
        self.send({"op": "fence", "jobs": [job.job_id], "deadline": deadline})

    def event(self, job: JobHandle, kind: str, timeout: float = WAIT) -> dict[str, Any]:
        return self.next_event(
            lambda event: event.get("job") == job.job_id and event["ev"] == kind, timeout
        )

    def exited(self, job: JobHandle, timeout: float = WAIT) -> dict[str, Any]:
        """The job's `exited` event; for a reused child that said "done" (and kept
        as idle, the fork server told: `finished`), the one its "done" stands for."""
        if not job.reused:
            return self.event(job, "exited", timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                return self.event(job, "exited", 0.02)
            if job.said_done(0.02):
                self.send({"op": "finished", "jobs": [job.job_id]})
                self.idle.setdefault(job.handler, []).append(job)
                return {"ev": "exited", "job": job.job_id, "pid": job.pid, "code": 0,
                        "signal": None, "fenced": False, "reason": None, "survivors": None,
                        "killed_for": None}
        raise TimeoutError(f"{job.job_id} did not end")

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                self.send({"op": "exit"})
        self.sock.close()
        try:
            self.process.wait(timeout=WAIT)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            for job in self.jobs:
                job.close()


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServerHarness]:
    harness = ForkServerHarness()
    yield harness
    harness.close()


@pytest.fixture
def own_server() -> Iterator[ForkServerHarness]:
    harness = ForkServerHarness()
    yield harness
    harness.close()


def wait_until_gone(pid: int, timeout: float) -> bool:
    """True once `pid` is dead (a zombie counts: nobody may have reaped it yet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.01)
    return False


# -- start-up


def test_ready_lists_handlers_with_their_import_errors(server: ForkServerHarness) -> None:
    handlers = server.ready["handlers"]
    assert server.ready["pid"] == server.process.pid
    assert handlers["echo"] is None
    assert "poolsup_no_such_module" in handlers["broken"]


def test_handler_that_failed_to_import_reports_a_final_error(server: ForkServerHarness) -> None:
    job = server.spawn("broken")
    message = job.read_message()
    assert message is not None
    assert message["t"] == "error"
    assert message["final"] is True
    assert message["error"].startswith("handler file failed to import: ModuleNotFoundError")
    assert "poolsup_no_such_module" in message["traceback"]
    assert server.exited(job)["code"] == 1


def test_unknown_handler_is_refused(server: ForkServerHarness) -> None:
    control, output = socket.socketpair()
    with control, output:
        server.send({"op": "spawn", "job": "unknown-1", "handler": "nope"},
                    [control.fileno(), output.fileno()])
        event = server.next_event(lambda event: event.get("job") == "unknown-1")
    assert event["ev"] == "spawn_failed"
    assert "nope" in event["error"]


def test_bad_messages_do_not_stop_the_fork_server(server: ForkServerHarness) -> None:
    server.sock.send(b"not json")
    server.send({"op": "no_such_op"})
    server.send({"op": "fence"})
    job = server.spawn("echo")
    assert job.read_message() is not None
    assert server.exited(job)["code"] == 0


# -- results and errors


def test_sync_handler_result_and_clean_exit(server: ForkServerHarness) -> None:
    job = server.spawn("echo", {"x": 1}, key="k-sync", token=42, attempt=2)
    assert job.read_message() == {
        "t": "result", "stopping": False,
        "value": {"key": "k-sync", "payload": {"x": 1}, "attempt": 2, "token": 42},
    }
    exited = server.exited(job)
    assert exited == {"ev": "exited", "job": job.job_id, "pid": job.pid, "code": 0,
                      "signal": None, "fenced": False,
                      "reason": None, "survivors": None, "killed_for": None}


@pytest.mark.parametrize("handler", ["async_echo", "returns_coroutine"])
def test_async_handler_result(server: ForkServerHarness, handler: str) -> None:
    job = server.spawn(handler, key="k-async")
    assert job.read_message() == result({"key": "k-async", "async": True})
    assert server.exited(job)["code"] == 0


def test_handler_exception_fails_the_attempt(server: ForkServerHarness) -> None:
    job = server.spawn("raises")
    message = job.read_message()
    assert message is not None
    assert message["t"] == "error"
    assert message["error"] == "ValueError: boom"
    assert message["final"] is False
    assert 'raise ValueError("boom")' in message["traceback"]
    assert "sandbox/child.py" not in message["traceback"]
    assert server.exited(job)["code"] == 0


def test_async_handler_traceback_starts_at_the_handler(server: ForkServerHarness) -> None:
    job = server.spawn("async_raises")
    message = job.read_message()
    assert message is not None
    assert message["error"] == "ValueError: async boom"
    frames = message["traceback"].split("\n")[1]
    assert "basic.py" in frames, message["traceback"]
    assert "asyncio" not in message["traceback"]


def test_fail_fails_the_job_for_good(server: ForkServerHarness) -> None:
    job = server.spawn("fails")
    message = job.read_message()
    assert message is not None
    assert (message["t"], message["error"], message["final"]) == ("error", "Fail: bad input", True)


def test_sys_exit_is_an_error(server: ForkServerHarness) -> None:
    job = server.spawn("exits")
    message = job.read_message()
    assert message is not None
    assert (message["error"], message["final"]) == ("handler called sys.exit(3)", False)


def test_unserializable_result_is_an_error(server: ForkServerHarness) -> None:
    job = server.spawn("unserializable")
    message = job.read_message()
    assert message is not None
    assert message["t"] == "error"
    assert message["error"].startswith("result is not JSON-serializable: ")
    assert message["final"] is False
    assert server.exited(job)["code"] == 0


# -- the job's process


def test_job_environment(server: ForkServerHarness) -> None:
    job = server.spawn("environment", key="k-env", token=9, attempt=3)
    assert job.read_message() == {"t": "result", "stopping": False, "value": {
        "POOLSUP_JOB_KEY": "k-env", "POOLSUP_JOB_TOKEN": "9", "POOLSUP_JOB_ATTEMPT": "3",
    }}


def test_job_is_its_own_session_and_process_group_leader(server: ForkServerHarness) -> None:
    job = server.spawn("process_ids")
    message = job.read_message()
    assert message is not None
    assert message["value"] == {"pid": job.pid, "pgid": job.pid, "sid": job.pid}


def test_stdout_and_stderr_go_to_the_output_socket(server: ForkServerHarness) -> None:
    job = server.spawn("prints")
    assert job.read_output() == "to stdout\nto stderr\n"
    assert server.exited(job)["code"] == 0


# -- stop, notify


def test_stop_aware_handler_sees_stopping_and_returns(server: ForkServerHarness) -> None:
    job = server.spawn("stop_aware")
    assert job.read_output_line() == "started\n"
    job.send({"t": "stop"})
    server.send({"op": "signal", "job": job.job_id, "signal": signal.SIGTERM})
    assert job.read_message() == result({"stopped": True, "stopping": True}, stopping=True)
    assert server.exited(job)["code"] == 0


def test_sigterm_alone_wakes_a_stop_aware_handler(server: ForkServerHarness) -> None:
    job = server.spawn("stop_aware")
    assert job.read_output_line() == "started\n"
    server.send({"op": "signal", "job": job.job_id, "signal": signal.SIGTERM})
    assert job.read_message() == result({"stopped": True, "stopping": True}, stopping=True)


@pytest.mark.parametrize("handler", ["stop_unaware", "async_stop_unaware"])
def test_sigterm_ends_a_stop_unaware_handler(server: ForkServerHarness, handler: str) -> None:
    job = server.spawn(handler)
    assert job.read_output_line() == "started\n"
    job.send({"t": "stop"})
    server.send({"op": "signal", "job": job.job_id, "signal": signal.SIGTERM})
    assert job.read_message() is None  # no result, no error
    assert server.exited(job)["code"] == 143


def test_sigterm_before_the_handler_starts_is_not_lost(server: ForkServerHarness) -> None:
    job = server.spawn("stop_unaware", start=False)
    server.send({"op": "signal", "job": job.job_id, "signal": signal.SIGTERM})
    time.sleep(0.05)
    server.start(job)
    assert server.exited(job)["code"] == 143
    assert job.read_output() == ""


def test_stop_sent_before_the_first_look_is_seen(server: ForkServerHarness) -> None:
    job = server.spawn("stopping_at_start", then_send=({"t": "stop"},))
    assert job.read_message() == result(True, stopping=True)


@pytest.mark.parametrize("reason", ["stop", "drain", "rebalance", "timeout"])
def test_the_handler_learns_why_it_is_stopped(server: ForkServerHarness, reason: str) -> None:
    job = server.spawn("stop_reason")
    time.sleep(0.2)
    job.send({"t": "stop", "reason": reason})
    assert job.read_message() == result([None, reason], stopping=True)


def test_notifications_end_with_a_stop(server: ForkServerHarness) -> None:
    job = server.spawn("notifications_until_stop")
    job.send({"t": "notify", "payload": 1})
    job.send({"t": "notify", "payload": {"two": 2}})
    job.send({"t": "stop"})
    assert job.read_message() == result([1, {"two": 2}], stopping=True)


def test_notification_reaches_the_handler(server: ForkServerHarness) -> None:
    job = server.spawn("next_notification")
    job.send({"t": "notify", "payload": {"resize": 2}})
    assert job.read_message() == result({"notification": {"resize": 2}})


def test_a_note_with_a_seq_is_acknowledged_once_the_handler_takes_it(
    server: ForkServerHarness,
) -> None:
    job = server.spawn("next_notification", then_send=(
        {"t": "notify", "payload": {"n": 1}, "seq": 5},
        {"t": "notify", "payload": {"n": 2}, "seq": 6},  # never taken: never acknowledged
    ))
    assert job.read_message() == {"t": "ack", "seq": 5}
    assert job.read_message() == result({"notification": {"n": 1}})
    assert job.read_message() is None
    assert server.exited(job)["code"] == 0


def test_a_note_without_a_seq_is_not_acknowledged(server: ForkServerHarness) -> None:
    job = server.spawn("notifications_until_stop", then_send=(
        {"t": "notify", "payload": 1},
        {"t": "notify", "payload": 2, "seq": 1},
        {"t": "stop"},
    ))
    assert job.read_message() == {"t": "ack", "seq": 1}
    assert job.read_message() == result([1, 2], stopping=True)


# -- fences and kills


def test_fence_in_the_past_kills_the_job(server: ForkServerHarness) -> None:
    job = server.spawn("sleeps", {"seconds": 60}, fence_in=None)
    server.fence(job, fence_clock() - 1)
    exited = server.exited(job)
    assert (exited["signal"], exited["fenced"]) == (signal.SIGKILL, True)


def test_fence_deadline_kills_the_job_when_it_comes(server: ForkServerHarness) -> None:
    job = server.spawn("sleeps", {"seconds": 60}, fence_in=0.2)
    exited = server.exited(job)
    assert (exited["signal"], exited["fenced"]) == (signal.SIGKILL, True)


def test_a_deadline_in_the_spawn_message_fences_from_birth(server: ForkServerHarness) -> None:
    control, child_control = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    output, child_output = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    job = JobHandle(f"job-{next(_job_ids)}", control, output)
    server.jobs.append(job)
    server.start(job, {"seconds": 60})
    with child_control, child_output:
        server.send(
            {"op": "spawn", "job": job.job_id, "handler": "sleeps",
             "deadline": fence_clock() + 0.2},
            [child_control.fileno(), child_output.fileno()],
        )
    job.pid = server.event(job, "spawned")["pid"]
    exited = server.exited(job)
    assert (exited["signal"], exited["fenced"]) == (signal.SIGKILL, True)


def test_a_spawn_whose_deadline_has_passed_is_refused_and_runs_nothing(
    server: ForkServerHarness,
) -> None:
    # A supervisor frozen between its claim and the spawn sends a deadline that is over:
    # the store may have handed the job to another supervisor, so not even the handler's
    # first line may run (chaos --overlap seed 42 on SQLite: a stale run started 2 s
    # after its lease ended, beside the newer one).
    control, child_control = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    output, child_output = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    job = JobHandle(f"job-{next(_job_ids)}", control, output)
    server.start(job, {"seconds": 60})
    with control, output:
        with child_control, child_output:
            server.send(
                {"op": "spawn", "job": job.job_id, "handler": "sleeps",
                 "deadline": fence_clock() - 0.01},
                [child_control.fileno(), child_output.fileno()],
            )
        event = server.next_event(lambda event: event.get("job") == job.job_id)
        assert event["ev"] == "spawn_failed", event
        assert "lease" in event["error"]
        control.settimeout(2.0)
        try:  # no child holds its end: nothing ran (reset: our start was never read)
            closed = control.recv(1 << 16) == b""
        except ConnectionResetError:
            closed = True
        assert closed


def test_fence_deadline_is_on_the_fence_clock(server: ForkServerHarness) -> None:
    job = server.spawn("sleeps", {"seconds": 60}, fence_in=None)
    sent_at = fence_clock()
    server.fence(job, sent_at + 0.3)
    exited = server.exited(job)
    elapsed = fence_clock() - sent_at
    assert (exited["signal"], exited["fenced"]) == (signal.SIGKILL, True)
    assert 0.3 <= elapsed < 1.0, elapsed


def unshare_time_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--time", "--monotonic", "1000", "true"],
                           capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.skipif(not unshare_time_works(), reason="needs time namespaces (unshare --time)")
def test_fence_deadline_is_boottime_not_monotonic() -> None:
    """In a time namespace where CLOCK_MONOTONIC runs 1000 s ahead of CLOCK_BOOTTIME, as
    after a suspend (BOOTTIME runs on through it, MONOTONIC stops)."""
    harness = ForkServerHarness(wrapper=("unshare", "--time", "--monotonic", "1000"))
    try:
        job = harness.spawn("sleeps", {"seconds": 60}, fence_in=None)
        sent_at = fence_clock()
        harness.fence(job, sent_at + 0.3)
        exited = harness.exited(job)
        elapsed = fence_clock() - sent_at
        assert exited["fenced"] is True
        assert 0.3 <= elapsed < 1.0, elapsed
    finally:
        harness.close()


def test_renewed_fence_keeps_the_job_alive(server: ForkServerHarness) -> None:
    job = server.spawn("sleeps", {"seconds": 0.5}, fence_in=0.2)
    server.fence(job, fence_clock() + 60)
    exited = server.exited(job)
    assert (exited["code"], exited["fenced"]) == (0, False)


def test_kill_op_kills_the_job(server: ForkServerHarness) -> None:
    job = server.spawn("sleeps", {"seconds": 60})
    server.send({"op": "kill", "job": job.job_id})
    exited = server.exited(job)
    assert (exited["signal"], exited["fenced"]) == (signal.SIGKILL, False)


def test_daemon_left_by_a_finished_job_is_killed(server: ForkServerHarness) -> None:
    job = server.spawn("escaped_grandchild")
    message = job.read_message()
    assert message is not None
    grandchild = message["value"]
    # Exit code 0: the handler saw the daemon outside the job's session and group.
    assert server.exited(job)["code"] == 0
    assert wait_until_gone(grandchild, WAIT)


def test_daemon_of_a_running_job_lives_until_that_job_ends(server: ForkServerHarness) -> None:
    job = server.spawn("escaped_grandchild_then_sleep")
    daemon = psutil.Process(int(job.read_output_line()))
    other = server.spawn("echo")
    assert server.exited(other)["code"] == 0  # the fork server looks for leftovers now
    server.spawn("echo")  # ...and has, once it answers this
    time.sleep(0.1)
    assert daemon.status() != psutil.STATUS_ZOMBIE
    server.send({"op": "kill", "job": job.job_id})
    assert server.exited(job)["signal"] == signal.SIGKILL
    assert wait_until_gone(daemon.pid, WAIT)


def leftover_specs() -> dict[str, dict[str, Any]]:
    return {"leaves_daemon": {"path": str(HANDLERS / "leftovers.py"),
                              "function": "leaves_daemon"}}


@pytest.fixture(scope="module")
def leftovers() -> Iterator[ForkServerHarness]:
    harness = ForkServerHarness(leftover_specs())
    yield harness
    harness.close()


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_exited_comes_only_once_the_daemon_a_job_left_is_gone(
    leftovers: ForkServerHarness, tmp_path: Path
) -> None:
    pid_file = tmp_path / "daemon.pid"
    job = leftovers.spawn("leaves_daemon", {"pid_file": str(pid_file), "megabytes": 256})
    message = job.read_message()
    assert message is not None and message["t"] == "result", message
    exited = leftovers.exited(job)
    daemon = int(pid_file.read_text().split()[1])
    assert not alive(daemon)
    assert exited["code"] == 0
    assert exited["survivors"] is None  # none named


# -- the fork server's own end


def may_lock_memory() -> bool:
    status = Path("/proc/self/status").read_text()
    cap_eff = int(status.split("CapEff:")[1].split()[0], 16)
    unlimited = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0] == resource.RLIM_INFINITY
    return bool(cap_eff >> 14 & 1) or unlimited  # CAP_IPC_LOCK


@pytest.mark.skipif(not may_lock_memory(), reason="needs CAP_IPC_LOCK or no RLIMIT_MEMLOCK")
def test_fork_server_memory_is_locked_and_its_childrens_is_not(
    server: ForkServerHarness,
) -> None:
    assert linux.locked_bytes(server.process.pid) > 10 << 20
    job = server.spawn("sleeps", {"seconds": 60})
    try:
        job_children = psutil.Process(server.process.pid).children()
        assert job.pid in {child.pid for child in job_children}  # with those forked ahead
        for child in job_children:
            assert linux.locked_bytes(child.pid) == 0
    finally:
        server.send({"op": "kill", "job": job.job_id})
        server.exited(job)


def test_a_one_job_childs_start_is_reported_while_it_runs_and_before_its_exit(
    server: ForkServerHarness,
) -> None:
    """Held a moment (`sandbox.held_starts`), so that a short job's start and exit reach
    the supervisor together, but not for the job's whole run."""
    began = time.monotonic()
    job = server.spawn("sleeps", {"seconds": 60})  # returns at its `spawned` event
    assert time.monotonic() - began < 1.0
    assert psutil.Process(job.pid).status() != psutil.STATUS_ZOMBIE
    server.send({"op": "kill", "job": job.job_id})
    assert server.exited(job)["pid"] == job.pid
    short = server.spawn("echo")  # its start comes with its exit, or before it
    assert short.read_message() is not None
    assert server.exited(short)["code"] == 0


def test_children_are_forked_ahead_a_few_at_a_time(own_server: ForkServerHarness) -> None:
    waiting = {child.pid for child in psutil.Process(own_server.process.pid).children()}
    assert len(waiting) == FORKED_AHEAD
    jobs = [own_server.spawn("echo") for _ in range(FORKED_AHEAD)]
    assert {job.pid for job in jobs} == waiting  # none forked for its spawn
    for job in jobs:
        assert job.read_message() is not None
        assert own_server.exited(job)["code"] == 0
    again = {child.pid for child in psutil.Process(own_server.process.pid).children()}
    assert len(again) == FORKED_AHEAD and not again & waiting  # the next batch


def test_a_spawn_survives_the_death_of_the_children_forked_ahead(
    own_server: ForkServerHarness,
) -> None:
    waiting = psutil.Process(own_server.process.pid).children()
    assert len(waiting) == FORKED_AHEAD  # forked ahead, waiting for a job
    for child in waiting:
        child.kill()
        child.wait(timeout=WAIT)  # reaped by the fork server
    job = own_server.spawn("echo")
    assert job.pid not in {child.pid for child in waiting}
    assert job.read_message() is not None
    assert own_server.exited(job)["code"] == 0


def test_children_die_within_a_second_of_a_killed_fork_server(
    own_server: ForkServerHarness,
) -> None:
    job = own_server.spawn("sleeps", {"seconds": 60})
    children = psutil.Process(own_server.process.pid).children()
    assert job.pid in {child.pid for child in children}
    own_server.process.kill()
    own_server.process.wait(timeout=WAIT)
    for child in children:  # the job and the children forked ahead
        assert wait_until_gone(child.pid, 1.0)


def test_fork_server_kills_its_jobs_and_exits_when_the_supervisor_goes(
    own_server: ForkServerHarness,
) -> None:
    job = own_server.spawn("escaped_grandchild_then_sleep")
    grandchild = int(job.read_output_line())
    own_server.sock.close()  # end of stream for the fork server
    assert own_server.process.wait(timeout=WAIT) == 0
    assert wait_until_gone(job.pid, WAIT)
    assert wait_until_gone(grandchild, WAIT)


def test_exit_op_kills_jobs_and_reports_them(own_server: ForkServerHarness) -> None:
    job = own_server.spawn("sleeps", {"seconds": 60})
    own_server.send({"op": "exit"})
    assert own_server.exited(job)["signal"] == signal.SIGKILL
    assert own_server.process.wait(timeout=WAIT) == 0


# -- limits and isolation

SECRET = "hunter2"


def limited_specs() -> dict[str, dict[str, Any]]:
    snoops = str(HANDLERS / "hostile_snoops.py")
    return {
        "memory_hog": {"path": str(HANDLERS / "hostile_memory.py"), "memory_limit": 100 << 20},
        "cpu_burner": {"path": str(HANDLERS / "hostile_cpu.py"), "cpu_limit": 1},
        "snoops": {"path": snoops, "env": {"FROM_TABLE": "yes"}},
        "inherits": {"path": snoops, "inherit_env": True},
        "confined": {"path": snoops, "function": "identity", "user": "nobody",
                     "group": "nogroup", "cwd": "/tmp", "nice": 5, "cpu_limit": 1.5},
        "unconfined": {"path": snoops, "function": "identity"},
        "ghost": {"path": snoops, "user": "poolsup-no-such-user"},
    }


@pytest.fixture(scope="module")
def limited() -> Iterator[ForkServerHarness]:
    """A fork server started the way the supervisor starts one, with a secret in its
    environment, as if the supervisor had passed it its own."""
    harness = ForkServerHarness(
        limited_specs(), table_by_fd=True, env={"POOLSUP_TEST_SECRET": SECRET}
    )
    yield harness
    harness.close()


def recorded_pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def test_memory_limit_kills_the_job_and_says_why(
    limited: ForkServerHarness, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    job = limited.spawn("memory_hog", {"pids": str(pids)})
    exited = limited.exited(job)
    assert exited["signal"] == signal.SIGKILL
    match = re.fullmatch(r"memory limit 100 MiB exceeded \(peak (\d+(?:\.\d)?) MiB\)",
                         exited["reason"])
    assert match, exited
    # Caught on the way: the handler would have gone on to 300 MB.
    assert 100 < float(match[1]) < 200
    assert all(wait_until_gone(pid, WAIT) for pid in recorded_pids(pids))


def test_cpu_limit_counts_the_whole_tree(limited: ForkServerHarness, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    started = time.monotonic()
    job = limited.spawn("cpu_burner", {"pids": str(pids), "children": 3})
    exited = limited.exited(job)
    elapsed = time.monotonic() - started
    assert exited["reason"] == "cpu limit 1 s exceeded"
    # Four burners: RLIMIT_CPU alone, per process, would take 1 s of CPU each.
    assert elapsed < 1.5 * max(1, 4 / (os.cpu_count() or 1)), elapsed
    assert len(recorded_pids(pids)) == 4
    assert all(wait_until_gone(pid, WAIT) for pid in recorded_pids(pids))


def test_cpu_limit_ends_a_single_burner(limited: ForkServerHarness, tmp_path: Path) -> None:
    job = limited.spawn("cpu_burner", {"pids": str(tmp_path / "pids")})
    exited = limited.exited(job)
    # Whichever came first: RLIMIT_CPU's SIGXCPU or the fork server's own sample.
    assert exited["signal"] in (signal.SIGXCPU, signal.SIGKILL)
    assert exited["reason"] == "cpu limit 1 s exceeded"


def test_environment_is_minimal_plus_the_handler_table(limited: ForkServerHarness) -> None:
    job = limited.spawn("snoops", key="k-env")
    message = job.read_message()
    assert message is not None, limited.exited(job)
    found = message["value"]
    environ = found["environ"]
    assert set(environ) <= {
        "PATH", "LANG", "LANGUAGE", "TZ", "HOME", "USER", "LOGNAME", "FROM_TABLE",
        "POOLSUP_JOB_KEY", "POOLSUP_JOB_TOKEN", "POOLSUP_JOB_ATTEMPT", "POOLSUP_JOB_SCRATCH",
    } | {name for name in environ if name.startswith("LC_")}
    assert environ["FROM_TABLE"] == "yes"
    assert environ["POOLSUP_JOB_KEY"] == "k-env"
    assert environ["PATH"] == os.environ["PATH"]
    for place in ("environ", "posix_environ", "proc_environ", "cmdline"):
        assert SECRET not in str(found[place]), place
    assert "FROM_TABLE" not in found["cmdline"]  # the table is not on the command line


def test_inherit_env_passes_the_whole_environment(limited: ForkServerHarness) -> None:
    job = limited.spawn("inherits")
    message = job.read_message()
    assert message is not None
    assert message["value"]["environ"]["POOLSUP_TEST_SECRET"] == SECRET


def test_every_job_gets_core_dumps_off_and_a_bound_on_open_files(
    limited: ForkServerHarness,
) -> None:
    job = limited.spawn("unconfined")
    message = job.read_message()
    assert message is not None
    found = message["value"]
    assert found["core"] == [0, 0]
    assert found["nofile"][0] == found["nofile"][1] <= 4096
    assert found["cpu"] == [resource.RLIM_INFINITY] * 2
    assert found["uid"] == os.geteuid()
    assert found["parent_death_signal"] == signal.SIGKILL


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_user_group_cwd_nice_and_cpu_rlimit(limited: ForkServerHarness) -> None:
    job = limited.spawn("confined")
    message = job.read_message()
    assert message is not None, limited.exited(job)
    # The parent-death signal among them: a change of user clears it, and the child
    # must arm it again.
    assert message["value"] == confined_identity()
    assert limited.exited(job)["code"] == 0


def confined_identity() -> dict[str, Any]:
    """What the "confined" handler of `limited_specs` returns."""
    nobody = pwd.getpwnam("nobody")
    nogroup = grp.getgrnam("nogroup").gr_gid
    return {
        "uid": nobody.pw_uid, "gid": nogroup,
        "groups": sorted(os.getgrouplist("nobody", nogroup)),
        "home": nobody.pw_dir, "user": "nobody", "cwd": "/tmp", "nice": 5,
        "core": [0, 0], "nofile": [4096, 4096], "cpu": [2, 3],
        "parent_death_signal": signal.SIGKILL,
    }


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_children_forked_ahead_for_a_handler_wait_confined_and_run_none_of_anothers() -> None:
    """The children forked ahead after a spawn confine themselves for its handler while
    they wait (its user, nice and limits are off its next job's way); a job of another
    handler never runs in one of them."""
    harness = ForkServerHarness(limited_specs(), table_by_fd=True,
                                env={"POOLSUP_TEST_SECRET": SECRET})
    try:
        server = psutil.Process(harness.process.pid)
        first = {child.pid for child in server.children()}
        for _ in range(FORKED_AHEAD):  # the first batch, forked for no handler
            job = harness.spawn("confined")
            assert job.read_message() is not None
            assert harness.exited(job)["code"] == 0
        waiting = {child.pid for child in server.children()} - first
        assert len(waiting) == FORKED_AHEAD
        nobody = pwd.getpwnam("nobody").pw_uid
        deadline = time.monotonic() + WAIT
        while not all(psutil.Process(pid).uids().real == nobody for pid in waiting):
            assert time.monotonic() < deadline, "not confined while waiting"
            time.sleep(0.01)
        assert {psutil.Process(pid).nice() for pid in waiting} == {5}

        other = harness.spawn("unconfined")
        message = other.read_message()
        assert message is not None, harness.exited(other)
        assert other.pid not in waiting
        assert (message["value"]["uid"], message["value"]["nice"]) == (os.geteuid(), 0)
        assert harness.exited(other)["code"] == 0

        again = harness.spawn("confined")
        message = again.read_message()
        assert message is not None, harness.exited(again)
        assert again.pid in waiting
        assert message["value"] == confined_identity()
        assert harness.exited(again)["code"] == 0
    finally:
        harness.close()


def test_unknown_user_fails_the_handler_like_an_import_error(
    limited: ForkServerHarness,
) -> None:
    assert limited.ready["handlers"]["ghost"] == "user 'poolsup-no-such-user' does not exist"
    job = limited.spawn("ghost")
    assert job.read_message() == {
        "t": "error", "error": "handler cannot run: user 'poolsup-no-such-user' does not exist",
        "traceback": "", "final": True,
    }
    assert limited.exited(job)["code"] == 1


def test_switching_user_without_root_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 12345)
    prepared = confinement.prepare(HandlerSpec(path="x.py", user="root"), {})
    assert prepared.error == (
        "running as user 'root' needs the supervisor to run as root (it runs as uid 12345)"
    )


def test_fence_kills_a_daemon_of_the_fenced_job(server: ForkServerHarness) -> None:
    job = server.spawn("escaped_grandchild_then_sleep", fence_in=None)
    daemon = int(job.read_output_line())
    server.fence(job, fence_clock())
    assert server.exited(job)["fenced"] is True
    assert wait_until_gone(daemon, WAIT)
