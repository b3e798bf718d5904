"""One writer per child's control socket: a note that the child never reads, blocked
on a full socket, does not keep a stop, a timeout or a drain from reaching the job
gracefully (it used to raise BusyResourceError: the child SIGKILLed, the lease lost)."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import anyio
import anyio.abc
import orjson
import pytest

from sandbox import protocol
from supervisor import Client
from supervisor.job.channel import ControlWriter
from tests.helpers.pool import HANDLERS_DIR, finished, wait_for
from tests.integration.conftest import Pool

EDGES = str(HANDLERS_DIR / "edges.py")
HANDLER = {"ignores_notes": {"path": EDGES, "function": "ignores_notes", "timeout": 0}}
NOTE = "x" * 900_000  # one note alone is larger than an AF_UNIX socket's buffer
LEASE_TTL = 3.0  # renewals, which bring the notes, every second


def run_behind_blocked_notes(pool: Pool, marker: Path) -> Client:
    client = pool.client()
    client.dispatch("quiet", {"marker": str(marker)}, handler="ignores_notes")
    wait_for(lambda: client.job("quiet")["state"] == "running", 20, message="job to run")
    for index in range(3):
        client.notify("quiet", {"index": index, "text": NOTE})
    time.sleep(2 * LEASE_TTL)  # renewals found the notes; the first is stuck mid-write
    return client


def assert_no_ungraceful_end(log: str) -> None:
    assert "BusyResourceError" not in log, log
    assert "lease lost" not in log, log
    assert "did not stop within stop_grace" not in log, log


def test_a_stop_behind_a_note_the_child_never_reads_stops_the_job_gracefully(
    pool: Pool, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    supervisor = pool.start(pool.config(HANDLER, lease_ttl=LEASE_TTL, stop_grace=10))
    client = run_behind_blocked_notes(pool, marker)

    client.stop("quiet", wait=False)

    record = wait_for(lambda: finished(client, "quiet"), 30, message="the job to stop")
    assert record["state"] == "stopped", (record, supervisor.log())
    assert marker.read_text() == "stopped gracefully", supervisor.log()
    assert record["lease_losses"] == 0, record
    assert_no_ungraceful_end(supervisor.log())


def test_a_drain_behind_a_note_the_child_never_reads_releases_the_job(
    pool: Pool, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    supervisor = pool.start(pool.config(HANDLER, lease_ttl=LEASE_TTL, stop_grace=10,
                                        drain_timeout=20))
    client = run_behind_blocked_notes(pool, marker)

    supervisor.signal(signal.SIGTERM)

    assert supervisor.wait(40) == 0, supervisor.log()
    record = client.job("quiet")
    assert (record["state"], record["lease_losses"]) == ("pending", 0), record
    assert marker.read_text() == "stopped gracefully", supervisor.log()
    assert_no_ungraceful_end(supervisor.log())


@pytest.mark.anyio
async def test_a_stop_does_not_wait_behind_a_blocked_note_and_goes_before_later_ones() -> None:
    """In one process, on a real socket pair: the stop returns at once while a note is
    stuck mid-write, and the reader, once it reads, finds whole messages: the stuck
    note, the stop, then the note asked for after the stop."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    stream = await anyio.abc.UNIXSocketStream.from_socket(ours)
    async with stream, anyio.create_task_group() as group:
        async def opened() -> anyio.abc.SocketStream:
            return stream

        writer = ControlWriter(opened, start=group.start_soon)
        group.start_soon(writer.send, protocol.Notify(seq=1, payload=NOTE))
        await anyio.wait_all_tasks_blocked()  # the note fills the socket and waits
        writer.stop("drain")
        group.start_soon(writer.send, protocol.Notify(seq=2, payload="later"))
        await anyio.wait_all_tasks_blocked()
        received = await anyio.to_thread.run_sync(read_lines, theirs, 3)
    theirs.close()
    assert [(m["t"], m.get("seq"), m.get("reason")) for m in received] == [
        ("notify", 1, None), ("stop", None, "drain"), ("notify", 2, None)]
    assert received[0]["payload"] == NOTE


def read_lines(sock: socket.socket, count: int) -> list[dict[str, object]]:
    data = b""
    while data.count(b"\n") < count:
        data += sock.recv(1 << 16)
    return [orjson.loads(line) for line in data.splitlines()]
