"""A running job's I/O inside its child: its SIGTERM handling (`StopGuard`), the
thread that reads its control socket, and `JobTraces`, which ends both (and the job's
sockets) for a child that runs another job after it.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import selectors
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from sandbox import descriptors, protocol, raw_signal
from sandbox.channel import ControlChannel
from sandbox.context import Inbox, Job, Stopped

_READER_JOIN_TIMEOUT = 1.0  # a reader still running after it: the child is retired
_END_OF_JOB = b"\0"  # on the wakeup pipe, for the reader thread


@dataclass(eq=False)
class JobTraces:
    """What a job's run leaves in its process, to be ended before the process runs
    another job (`_run_jobs`)."""

    channel: ControlChannel | None = None
    inbox: Inbox | None = None
    guard: StopGuard | None = None
    readers: list[threading.Thread] = field(default_factory=list)

    @property
    def stop_seen(self) -> bool:
        return self.inbox is not None and self.inbox.stop_seen

    def close(self) -> bool:
        """End the job's I/O: its reader thread, its SIGTERM handling, its output (all
        of it written to the output socket); fds 0-2 are /dev/null again, whatever the
        job did with them. The control socket stays, the child's for its next jobs.
        Whether the reader thread ended."""
        if self.guard is not None and self.readers:
            self.guard.end_reader()
        for reader in self.readers:
            reader.join(_READER_JOIN_TIMEOUT)
        ended = not any(reader.is_alive() for reader in self.readers)
        if self.guard is not None and ended:
            self.guard.uninstall()  # after the reader, which watches its wakeup pipe
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()
        null = os.open(os.devnull, os.O_RDWR)  # fd 0 itself if the job closed it
        for fd in (0, 1, 2):
            if fd != null:
                os.dup2(null, fd)
        if null > 2:
            os.close(null)
        return ended


class StopGuard:
    """SIGTERM handling: always marks the job stopping; ends a stop-unaware handler.

    The C-level signal handler writes to a wakeup pipe that the reader thread watches,
    so `wait_stop` wakes at once even while the main thread is busy in C code.
    """

    def __init__(self, job: Job, inbox: Inbox) -> None:
        self._job = job
        self._inbox = inbox
        self._running = False
        self._pipe: tuple[int, int] | None = None

    def install(self) -> int:
        read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._pipe = (read_fd, write_fd)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        raw_signal.set_handler(signal.SIGTERM, self._on_sigterm)
        # The fork server blocks SIGTERM across fork so that none is lost before now.
        raw_signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGTERM,))
        return read_fd

    def end_reader(self) -> None:
        """Tell the reader thread, which watches the wakeup pipe, that the job is over
        (a zero byte: no signal's number)."""
        if self._pipe is not None:
            with contextlib.suppress(OSError):
                os.write(self._pipe[1], _END_OF_JOB)

    def uninstall(self) -> None:
        """Block SIGTERM again, and close the wakeup pipe (its reader has stopped)."""
        raw_signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGTERM,))
        signal.set_wakeup_fd(-1)
        raw_signal.set_handler(signal.SIGTERM, raw_signal.SIG_DFL)
        if self._pipe is not None:
            descriptors.close_all(self._pipe)
            self._pipe = None

    def run(self, function: Callable[..., Any], job: Job) -> Any:
        if self._inbox.terminated:
            raise Stopped  # SIGTERM came before the handler started
        self._running = True
        try:
            return _call(function, job)
        finally:
            self._running = False

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self._inbox.terminated = True
        if self._running and not self._job.stop_aware:
            self._running = False
            raise Stopped



def start_reader(
    channel: ControlChannel, inbox: Inbox, wakeup_fd: int
) -> threading.Thread:
    """Start the reader thread; return it once it has taken in what was already sent."""
    caught_up = threading.Event()
    reader = threading.Thread(
        target=_read_control, args=(channel, inbox, wakeup_fd, caught_up), daemon=True
    )
    reader.start()
    caught_up.wait()
    return reader


def _read_control(
    channel: ControlChannel, inbox: Inbox, wakeup_fd: int, caught_up: threading.Event
) -> None:
    """Reader thread: stop and notify messages, SIGTERM wakeups, end of stream."""
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(channel.sock, selectors.EVENT_READ)
            selector.register(wakeup_fd, selectors.EVENT_READ)
            while True:
                while (message := _next_buffered(channel)) is not None:
                    _dispatch(message, inbox)
                events = selector.select(None if caught_up.is_set() else 0)
                if not events:
                    caught_up.set()
                for key, _ in events:
                    if key.fd == wakeup_fd:
                        # One byte per signal, its number; this can come before the
                        # Python-level handler has run in the main thread.
                        woken = os.read(wakeup_fd, 512)
                        if signal.SIGTERM in woken:
                            inbox.request_stop()
                        if _END_OF_JOB[0] in woken:
                            return
                    elif not channel.feed():
                        inbox.request_stop()  # the supervisor is gone
                        return
    finally:
        caught_up.set()


def _next_buffered(channel: ControlChannel) -> protocol.Message | None:
    while True:
        try:
            return channel.buffered_message()
        except protocol.UnknownMessage:
            continue  # a newer supervisor's kind of message: nothing here acts on it
        except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
            print(f"poolsup: bad control message: {exc}", file=sys.stderr)


def _dispatch(message: protocol.Message, inbox: Inbox) -> None:
    match message:
        case protocol.Stop(reason=reason):
            inbox.request_stop(reason if isinstance(reason, str) else None)
        case protocol.Notify(payload=payload, seq=seq):
            inbox.deliver(payload, seq if isinstance(seq, int) else None)


def _call(function: Callable[..., Any], job: Job) -> Any:
    if inspect.iscoroutinefunction(function):
        return _run_coroutine(function(job))
    value = function(job)
    if inspect.iscoroutine(value):
        return _run_coroutine(value)
    return value


def _run_coroutine(coroutine: Any) -> Any:
    # Imported here, not at the top: a fork server with asyncio loaded forks slower, so
    # it is preloaded only when some handler is async (loader.preload).
    import asyncio

    return asyncio.run(coroutine)
