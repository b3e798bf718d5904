"""The supervisor's side of the fork server socket, against a scripted fork server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import anyio
import anyio.lowlevel
import orjson
import pytest

from sandbox import protocol
from supervisor.config import load_config
from supervisor.doorbell import Doorbell
from supervisor.errors import PoolsupError
from supervisor.forks.child import Child
from supervisor.forks.fork_client import ForkServerClient
from supervisor.forks.launch import open_fork_server
from tests.helpers.pool import write_pool

pytestmark = pytest.mark.anyio


def scripted_fork_server(sock: socket.socket, exited: dict[str, object]) -> None:
    """Answer one spawn with `spawned`, then `exited` with the given fields."""
    sock.sendall(orjson.dumps({"ev": "ready", "pid": 1, "handlers": {}}))
    data, fds, _, _ = socket.recv_fds(sock, 65536, 2)
    for fd in fds:
        socket.close(fd)
    job = orjson.loads(data)["job"]
    sock.sendall(orjson.dumps({"ev": "spawned", "job": job, "pid": 4242}))
    sock.sendall(orjson.dumps({"ev": "exited", "job": job, "pid": 4242, **exited}))


async def exit_status_of(exited: dict[str, object]):  # type: ignore[no-untyped-def]
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setblocking(False)
    process = subprocess.Popen(["true"])  # noqa: ASYNC220 - stands in for the fork server
    server = ForkServerClient(process, ours)
    try:
        async with anyio.create_task_group() as group:
            await group.start(server.serve)
            group.start_soon(anyio.to_thread.run_sync, scripted_fork_server, theirs, exited)
            with anyio.fail_after(10):
                child = await server.spawn("job-1", "h", 0.0, first_message=b"")
                await child.exited.wait()
            child.close()
            theirs.close()
        return child.status
    finally:
        ours.close()
        process.wait()


async def test_exit_status_names_the_survivors() -> None:
    status = await exit_status_of(
        {"code": 0, "signal": None, "fenced": False, "survivors": [17, 18]}
    )
    assert status.survivors == (17, 18)
    assert status.code == 0


async def test_exit_status_without_survivors() -> None:
    status = await exit_status_of({"code": None, "signal": 9, "fenced": True})
    assert status.survivors == ()
    assert status.fenced is True


async def test_a_fork_server_answers_pings_and_a_frozen_one_does_not(tmp_path: Path) -> None:
    config = load_config(write_pool(
        tmp_path, store=f"sqlite:///{tmp_path}/pool.db", pool="ping",
        handlers={"echo": {"path": "basic.py", "function": "echo"}},
    ), require_handlers=True)
    async with open_fork_server(config.handlers) as server:
        assert await server.ping(timeout=10.0)
        os.kill(server.pid, signal.SIGSTOP)
        try:
            assert not await server.ping(timeout=0.5)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        assert await server.ping(timeout=10.0)
        os.kill(server.pid, signal.SIGKILL)
        with anyio.fail_after(10):
            await server.died.wait()
        assert not await server.ping(timeout=10.0)


async def test_a_child_started_without_waiting_for_the_report_ends_at_once_if_refused(
    tmp_path: Path,
) -> None:
    """`start` returns before the fork server reports the child; a spawn it refuses ends
    the child at once, rings its job's wake and says it never started (the runner then
    releases the job), while `spawn` still raises."""
    config = load_config(write_pool(
        tmp_path, store=f"sqlite:///{tmp_path}/pool.db", pool="start",
        handlers={"echo": {"path": "basic.py", "function": "echo"}},
    ), require_handlers=True)
    async with open_fork_server(config.handlers) as server:
        wake = Doorbell()
        refused = await server.start("job-1", "no-such-handler", 0.0, first_message=b"",
                                     wake=wake)
        with anyio.fail_after(10):
            await wake.wait()
        assert refused.exited.is_set() and refused.never_started
        assert "unknown handler" in (refused.spawn_error or "")
        refused.close()
        with pytest.raises(PoolsupError, match="unknown handler"):
            await server.spawn("job-2", "no-such-handler", 0.0, first_message=b"")
        begin = protocol.Start(key="k", payload=orjson.Fragment(b"null"), token=3, attempt=1,
                               checkpoint=None, trace=None)
        started = await server.start("job-3", "echo", protocol.fence_clock() + 60,
                                     first_message=protocol.encode_line(begin))
        with anyio.fail_after(10):
            await started.exited.wait()
        assert started.pid is not None and not started.never_started
        started.close()


def recv_now(sock: socket.socket) -> bytes | None:
    """What `sock` holds now, or None if nothing."""
    try:
        return sock.recv(65536, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return None


def recv_now_peek(sock: socket.socket) -> bytes | None:
    try:
        return sock.recv(65536, socket.MSG_DONTWAIT | socket.MSG_PEEK)
    except BlockingIOError:
        return None


async def test_a_reused_childs_start_is_written_only_after_its_assignment() -> None:
    """The fork server must know a reused child's job, and its fence, before the child
    can start it: with the fork server's socket full, nothing reaches the child; once
    the fork server reads, the assignment (with the finished notice of the child's last
    job in the same packet) comes before the child gets its start."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setblocking(False)
    control, child_control = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    output, child_output = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    control.setblocking(False)
    process = subprocess.Popen(["true"])  # noqa: ASYNC220 - stands in for the fork server
    server = ForkServerClient(process, ours)
    try:
        async with anyio.create_task_group() as group:
            await group.start(server.serve)
            theirs.sendall(orjson.dumps({"ev": "ready", "pid": 1, "handlers": {}}))
            await server.wait_ready()
            # The child's last job, as if it ran here and said "done".
            last = Child(job_id="job-1", key="k", forked_at=0.0, control_socket=control,
                         output_socket=output, handler="h", pid=4242)
            last.reported_done()
            server.done_with(last, reusable=True)
            filler = 0
            while True:  # the fork server's socket full: a writer must wait
                try:
                    ours.send(orjson.dumps({"op": "ping", "seq": filler}))
                except BlockingIOError:
                    break
                filler += 1
            started: list[Child] = []
            returned = anyio.Event()

            async def start() -> None:
                started.append(await server.start(
                    "job-2", "h", protocol.fence_clock() + 60, first_message=b"START\n"))
                returned.set()

            group.start_soon(start)
            await anyio.sleep(0.2)
            assert recv_now_peek(child_control) is None  # no start before the assignment
            assigned: list[protocol.Request] = []
            while not assigned:  # the fork server reads, one packet at a time
                start_written = recv_now_peek(child_control) is not None
                while (packet := recv_now(theirs)) is not None:  # after the look
                    requests = protocol.decode_requests(packet)
                    if not isinstance(requests[-1], protocol.Ping):
                        assigned = requests
                        break
                    if not start_written:
                        break  # one packet: room for the next
                # The start was written only once the assignment was in our socket.
                assert assigned or not start_written
                await anyio.sleep(0.01)
            assert assigned[0] == protocol.Finished(jobs=["job-1"])
            assert isinstance(assigned[1], protocol.Assign)
            assert (assigned[1].job, assigned[1].pid) == ("job-2", 4242)
            with anyio.fail_after(5):
                await returned.wait()
            assert child_control.recv(64) == b"START\n"
            assert started[0].pid == 4242
            # Ended before the fork server goes: a child still held at its death would
            # have this process kill its own children as the dead server's orphans.
            theirs.sendall(orjson.dumps({"ev": "exited", "job": "job-2", "pid": 4242,
                                         "code": 0, "signal": None, "fenced": False}))
            with anyio.fail_after(5):
                await started[0].exited.wait()
            assert server.child_count == 0
            theirs.close()
    finally:
        for sock in (ours, control, child_control, output, child_output):
            sock.close()
        process.wait()


async def test_a_done_childs_notice_goes_with_its_next_assignment_or_soon_after() -> None:
    """The fork server wakes once per reused job: the `finished` notice of a child's
    last job waits for the next request (the assignment of its next job, a claim's round
    trip later), in one packet with it; with no request, it goes on its own soon."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setblocking(False)
    theirs.settimeout(5)
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2)]
    process = subprocess.Popen(["true"])  # noqa: ASYNC220 - stands in for the fork server
    server = ForkServerClient(process, ours)

    def done(job_id: str) -> None:
        (control, _), (output, _) = pairs
        control.setblocking(False)
        child = Child(job_id=job_id, key="k", forked_at=0.0, control_socket=control,
                      output_socket=output, handler="h", pid=4242)
        child.reported_done()
        server.done_with(child, reusable=True)

    try:
        async with anyio.create_task_group() as group:
            await group.start(server.serve)
            theirs.sendall(orjson.dumps({"ev": "ready", "pid": 1, "handlers": {}}))
            await server.wait_ready()
            done("job-1")
            for _ in range(3):  # the loop goes round, as while the next claim is out
                await anyio.lowlevel.checkpoint()
            child = await server.start("job-2", "h", protocol.fence_clock() + 60,
                                       first_message=b"START\n")
            requests = protocol.decode_requests(theirs.recv(65536))
            assert requests[0] == protocol.Finished(jobs=["job-1"])
            assert isinstance(requests[1], protocol.Assign) and requests[1].job == "job-2"
            child.reported_done()
            server.done_with(child, reusable=True)
            packet = await anyio.to_thread.run_sync(theirs.recv, 65536)  # no request comes
            assert protocol.decode_requests(packet) == [protocol.Finished(jobs=["job-2"])]
            group.cancel_scope.cancel()
    finally:
        for sock in (ours, theirs, *(end for pair in pairs for end in pair)):
            sock.close()
        process.wait()


async def lines_until(child: Child, last: str) -> list[dict[str, object]]:
    """What `child` says on its control socket, up to a message of type `last`."""
    sock, data, said = child.control_socket, b"", []
    with anyio.fail_after(10):
        while not said or said[-1]["t"] != last:
            await anyio.wait_readable(sock)
            chunk = sock.recv(65536)
            assert chunk, f"its channel ended after {said}"
            data += chunk
            *whole, data = data.split(b"\n")
            said.extend(orjson.loads(line) for line in whole)
    return said


async def test_a_reused_childs_last_job_starts_its_successor(tmp_path: Path) -> None:
    """The job after a reused child's last runs in a child spawned, confined and kept
    idle while the last one ran: it starts on that child's channel (its pid known at
    once), not with a spawn whose report comes later."""
    config = load_config(write_pool(
        tmp_path, store=f"sqlite:///{tmp_path}/pool.db", pool="successor",
        handlers={"echo": {"path": "basic.py", "function": "echo",
                           "max_jobs_per_child": 2}},
    ), require_handlers=True)

    def start_line(key: str) -> bytes:
        return protocol.encode_line(protocol.Start(
            key=key, payload=orjson.Fragment(b'"hi"'), token=3, attempt=1,
            checkpoint=None, trace=None))

    async with open_fork_server(config.handlers) as server:
        fence = protocol.fence_clock() + 60
        first = await server.start("job-1", "echo", fence, first_message=start_line("a"))
        assert [said["t"] for said in await lines_until(first, "done")] == ["result", "done"]
        with anyio.fail_after(10):
            await first.spawned.wait()
        first.reported_done()
        server.done_with(first, reusable=True)
        last = await server.start("job-2", "echo", fence, first_message=start_line("b"))
        assert last.pid == first.pid  # its second job, its last
        assert (await lines_until(last, "result"))[-1]["value"]["key"] == "b"
        with anyio.fail_after(10):
            await last.exited.wait()  # it exits after its last job
        last.close()
        await anyio.sleep(1.0)  # the successor was spawned at the last job's start
        after = await server.start("job-3", "echo", fence, first_message=start_line("c"))
        assert after.pid not in (None, first.pid)  # known at once: no spawn's report
        assert (await lines_until(after, "done"))[0]["value"]["key"] == "c"
        after.reported_done()
        server.done_with(after, reusable=True)
