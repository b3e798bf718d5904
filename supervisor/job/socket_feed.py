"""A child's socket read without a task of its own: the event loop calls back when the
socket is readable, and what arrived is fed to its reader (control messages, output).

A job then needs one task on the supervisor's side, its own, instead of one more per
socket.  The callback reads what the socket holds without blocking and never raises:
an error reading it ends the feed like an end of stream."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

import anyio

log = logging.getLogger("poolsup.jobs")

RECV_SIZE = 65536
READS_PER_CALL = 4


class SocketFeed:
    def __init__(self, sock: socket.socket, feed: Callable[[bytes], None]) -> None:
        self._socket = sock
        self._fd = sock.fileno()
        self._feed = feed
        self._loop = asyncio.get_running_loop()
        self.closed = anyio.Event()
        self._loop.add_reader(self._fd, self._readable)

    def _readable(self) -> None:
        """Read what the socket holds, up to its end if that came too (a child's last
        message and its exit often arrive together: one callback, not two); at most
        READS_PER_CALL reads, so that a child printing without pause cannot keep the
        event loop here."""
        for _ in range(READS_PER_CALL):
            if self.closed.is_set():
                return
            try:
                data = self._socket.recv(RECV_SIZE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self.close()
                return
            try:
                self._feed(data)
            except Exception:  # a reader's bug must not stop the event loop's callbacks
                log.exception("reading a child's socket failed")
                self.close()

    def close(self) -> None:
        """Stop reading (at the end of stream, or when the job's supervision ends)."""
        if not self.closed.is_set():
            self._loop.remove_reader(self._fd)
            self.closed.set()
