"""A fork server that dies after a spawn was sent but before it reported the child:
the child may have run (and killed it), so its job's run ended with the death, judged
like any other (`core.blame`), not a spawn that never happened.

The scenario runs in a Python process of its own: on a fork server's death the client
kills every child of its process but the fork servers (`orphans.kill_orphans`), which in
a test worker would be the session's redis-server."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import anyio

from supervisor.core.blame import Blame
from supervisor.forks import orphans
from supervisor.forks.fork_client import ForkServerClient

ROOT = Path(__file__).resolve().parents[2]


def dies_after_the_spawn(sock: socket.socket) -> None:
    sock.sendall(b'{"ev": "ready", "pid": 1, "handlers": {}}')
    _, fds, _, _ = socket.recv_fds(sock, 65536, 2)
    for fd in fds:
        socket.close(fd)
    sock.close()  # gone without a word about the child


def test_a_spawn_sent_to_a_fork_server_that_then_dies_is_a_run_ended_by_the_death() -> None:
    ran = subprocess.run([sys.executable, "-m", "tests.integration.test_spawn_then_death"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.strip() == "ok"


async def a_spawn_then_the_death() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setblocking(False)
    # Stands in for the fork server's process: killed, as a job would kill it.
    process = subprocess.Popen(["sleep", "60"])  # noqa: ASYNC220
    orphans.fork_server_pids.add(process.pid)  # as open_fork_server does: not an orphan
    server = ForkServerClient(process, ours)
    try:
        async with anyio.create_task_group() as group:
            await group.start(server.serve)
            group.start_soon(anyio.to_thread.run_sync, dies_after_the_spawn, theirs)
            process.kill()
            with anyio.fail_after(10):
                child = await server.spawn("7", "h", 0.0, first_message=b"", key="killer")
            child.close()
    finally:
        ours.close()
        process.wait()
        orphans.fork_server_pids.discard(process.pid)
    assert child.pid is None and child.exited.is_set()
    assert child.status is not None
    assert child.status.fork_server_died == "killed by SIGKILL"
    assert child.status.verdict is not None and child.status.verdict.blame is Blame.BLAMED


if __name__ == "__main__":
    anyio.run(a_spawn_then_the_death)
    print("ok")
