"""A child's control socket as the supervisor writes it: one writer, whole messages.

Two kinds of message go to a running child after its start: notes (the courier) and
the stop (graceful stop, timeout, drain, move).  Both go through one `ControlWriter`,
so that two writes never meet on the socket (anyio raises BusyResourceError on the
second) and a message is never cut by another.

A note is written as a whole, however long that takes: a handler that never reads its
notes leaves the courier waiting on a full socket, which is harmless.  A stop never
waits for that: `stop` returns at once and a task of its own writes the message as
soon as the socket is free, before any note not yet begun (the lock is fair, and the
courier asks for its next write only after its last one ended).  The stop logic then
signals the child's process group; SIGTERM is what tells a handler to stop in any
case, and the message adds the reason for a handler that reads it.

Once the child is gone, writes are dropped: its exit tells the rest.
"""

from __future__ import annotations

from contextlib import suppress

import anyio
import anyio.abc

from sandbox import protocol
from supervisor.job.latest_write import StartTask


class ControlWriter:
    def __init__(self, stream: anyio.abc.ByteSendStream, start: StartTask) -> None:
        self._stream = stream
        self._start = start
        self._lock = anyio.Lock()

    async def send(self, message: dict[str, object]) -> None:
        """Write `message` after every message asked for before it; returns once it is
        written, or dropped because the child is gone."""
        line = protocol.encode_line(message)
        async with self._lock:
            with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await self._stream.send(line)

    def stop(self, reason: str) -> anyio.Event:
        """Tell the child to stop for `reason`, without waiting for the socket; the
        event is set once the message is written (or dropped)."""
        message: dict[str, object] = {"t": protocol.MSG_STOP, "reason": reason}
        written = anyio.Event()

        async def write() -> None:
            try:
                await self.send(message)
            finally:
                written.set()

        self._start(write)
        return written
