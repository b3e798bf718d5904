"""A child's channel as the supervisor reads and writes it: everything on its control
socket, and the feeds of its sockets (see `sandbox.protocol` for the messages).

Reading: an event-loop callback (`SocketFeed`) reads what a socket holds and feeds it to
its reader, so that a job needs one task on the supervisor's side, its own, instead of
one more per socket.  The callback never raises: an error reading ends the feed like an
end of stream.  `ControlReader` parses the control socket, bounded, in linear time: at
the end a result, an error, a snooze or a schedule's end; an acknowledgement for each
note the handler took, the checkpoints it saved, its thread stacks when asked, a traced
job's spans.  A result
larger than `max_result`, or bytes that are not a message, are a protocol error that
fails the attempt; they never end the job's supervision.

Writing: after its start (written with the spawn), two kinds of message go to a running
child: notes (the courier) and the stop (graceful stop, timeout, drain, move).  Both go
through one `ControlWriter`, so that two writes never meet on the socket (anyio raises
BusyResourceError on the second) and a message is never cut by another.  A note is
written as a whole, however long that takes: a handler that never reads its notes
leaves the courier waiting on a full socket, which is harmless.  A stop never waits for
that: `stop` returns at once and a task of its own writes the message as soon as the
socket is free, before any note not yet begun (the lock is fair, and the courier asks
for its next write only after its last one ended).  The stop logic then signals the
child's process group; SIGTERM is what tells a handler to stop in any case, and the
message adds the reason for a handler that reads it.  Once the child is gone, writes are
dropped: its exit tells the rest.
"""

from __future__ import annotations

import asyncio
import logging
import select
import socket
import weakref
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import orjson

from sandbox import protocol
from supervisor.core.outcome import ChildExit
from supervisor.doorbell import Latch
from supervisor.job.running import StartTask

if TYPE_CHECKING:
    from supervisor.forks.child import ExitStatus

log = logging.getLogger("poolsup.jobs")

RECV_SIZE = 65536
READS_PER_CALL = 4
FEEDS_PER_CALL = 256  # sockets read at one callback, at most (a level-triggered epoll:
# the rest are read at the next)
MAX_TRACEBACK = 8192
MAX_RETIRED_REASON = 200
# Room for an error message and its traceback on top of a result's own limit.
MESSAGE_OVERHEAD = 1024 * 1024


class SocketFeed:
    """A child's socket read without a task of its own: the event loop calls back when
    the socket is readable, and what arrived goes to `feed`."""

    def __init__(self, sock: socket.socket, feed: Callable[[bytes], None],
                 ended: Callable[[], None] | None = None) -> None:
        self._socket = sock
        self._fd = sock.fileno()
        self._feed = feed
        self._on_end = ended  # called once it closes
        self._ended = False
        self._loop = asyncio.get_running_loop()
        self.closed = Latch()
        self._feeds = _Feeds.of(self._loop)
        self._feeds.add(self._fd, self)

    def _readable(self) -> None:
        """Read what the socket holds, up to its end if that came too (a child's last
        message and its exit often arrive together: one callback, not two); at most
        READS_PER_CALL reads, so that a child printing without pause cannot keep the
        event loop here."""
        for _ in range(READS_PER_CALL):
            if self._ended:
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

    def read_rest(self) -> None:
        """Read what the socket holds now, to its end if that came, and stop reading: a
        reused child's output once it said "done" (it wrote all of it before that)."""
        while not self._ended:
            try:
                data = self._socket.recv(RECV_SIZE)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                data = b""
            if not data:
                break
            try:
                self._feed(data)
            except Exception:
                log.exception("reading a child's socket failed")
                break
        self.close()

    def close(self) -> None:
        """Stop reading (at the end of stream, or when the job's supervision ends)."""
        if not self._ended:
            self._ended = True
            self._feeds.remove(self._fd)
            self.closed.set()
            if self._on_end is not None:
                self._on_end()

    async def drained(self, grace: float) -> None:
        """Until the child's end of the socket is closed, or `grace` seconds passed (a
        grandchild may hold it open): a timer that ends the feed, not a cancel scope."""
        if self.closed.is_set():
            return
        giving_up = self._loop.call_later(grace, self.close)
        try:
            await self.closed.wait()
        finally:
            giving_up.cancel()


class _Feeds:
    """Every child socket an event loop reads, in one epoll of their own that the loop
    watches as a single reader: a job's sockets then cost one `epoll_ctl` each to add and
    to remove, not the loop's reader bookkeeping (a handle, a selector key) for each."""

    _of: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Feeds] = (
        weakref.WeakKeyDictionary())

    _last: tuple[asyncio.AbstractEventLoop, _Feeds] | None = None  # the loop asked last

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> _Feeds:
        last = cls._last
        if last is not None and last[0] is loop:
            return last[1]
        feeds = cls._of.get(loop)
        if feeds is None:
            feeds = cls._of[loop] = cls(loop)
        cls._last = (loop, feeds)
        return feeds

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._epoll = select.epoll(flags=select.EPOLL_CLOEXEC)
        self._feeds: dict[int, SocketFeed] = {}
        loop.add_reader(self._epoll.fileno(), self._ready)

    def add(self, fd: int, feed: SocketFeed) -> None:
        self._feeds[fd] = feed
        try:
            self._epoll.register(fd, select.EPOLLIN)
        except FileExistsError:  # its number's last socket closed while registered
            self._epoll.modify(fd, select.EPOLLIN)

    def remove(self, fd: int) -> None:
        self._feeds.pop(fd, None)
        try:  # noqa: SIM105 - suppress() costs three calls, twice a job
            self._epoll.unregister(fd)
        except OSError:
            pass  # closed already: the kernel removed it

    def _ready(self) -> None:
        for fd, _ in self._epoll.poll(0, FEEDS_PER_CALL):
            feed = self._feeds.get(fd)
            if feed is not None:
                feed._readable()


class ControlReader:
    """Parses what one child sends on its control socket, fed by a `SocketFeed`."""

    def __init__(
        self,
        *,
        max_result: int,
        on_ack: Callable[[int], None] = lambda seq: None,
        on_checkpoint: Callable[[bytes], None] = lambda value: None,
        on_stacks: Callable[[list[dict[str, Any]]], None] = lambda stacks: None,
        on_spans: Callable[[protocol.Spans], None] | None = None,  # a traced job's
        on_done: Callable[[], None] = lambda: None,  # a reused child's job is over
    ) -> None:
        self._max_result = max_result
        self._max_line = max_result + MESSAGE_OVERHEAD
        self._on_ack = on_ack
        self._on_checkpoint = on_checkpoint
        self._on_stacks = on_stacks
        self._on_spans = on_spans
        self._on_done = on_done
        self._buffer = bytearray()
        self._skipping = 0  # bytes of an over-long line being skipped, 0 when none
        self._skipping_result = False
        self.error: protocol.Error | None = None  # the child's error message, if any
        self.result_json: bytes | None = None
        self.result_answered_stop = False
        self.snooze: float | None = None  # the handler raised sandbox.Snooze(this)
        self.end_schedule = False  # a producer raised sandbox.EndSchedule
        # Why a reused child could not be made clean after a job that ended well.
        self.retired: str | None = None
        self.traceback = ""
        self.protocol_error: str | None = None

    def exit_report(self, status: ExitStatus | None) -> ChildExit:
        """How the child ended: what it said here, and how the fork server saw it exit."""
        return ChildExit(
            # A child is not trusted to send the types the protocol names.
            error=None if self.error is None else str(self.error.error or ""),
            final=self.error is not None and bool(self.error.final),
            result_json=self.result_json,
            exit_code=status.code if status else None,
            exit_signal=status.signal if status else None,
            fenced=status.fenced if status else False,
            reason=status.reason if status else None,
            killed_for=status.killed_for if status else None,
            protocol_error=self.protocol_error,
            answered_stop=self.result_answered_stop,
            snooze=self.snooze,
            end_schedule=self.end_schedule,
        )

    def feed(self, chunk: bytes) -> None:
        searched = len(self._buffer)  # earlier bytes hold no newline
        self._buffer += chunk
        while (end := self._buffer.find(b"\n", searched)) >= 0:
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            searched = 0
            if self._skipping:
                self._end_skip(self._skipping + len(line))
            elif line:
                self._take(line)
        if len(self._buffer) > self._max_line:
            if not self._skipping:
                self._skipping_result = self._buffer.startswith(b'{"t":"result"')
            self._skipping += len(self._buffer)
            self._buffer.clear()

    def _end_skip(self, size: int) -> None:
        self._skipping = 0
        if self._skipping_result:
            self._fail(f"result is about {size} bytes, above max_result "
                       f"({self._max_result} bytes)")
        else:
            self._fail(f"the child sent a control message of {size} bytes, above the limit")

    def _take(self, line: bytes) -> None:
        # A returned value's JSON is kept as it came, without decoding and encoding it
        # again (`protocol.result_line` writes it so).
        result = protocol.read_result_line(line)
        if result is not None:
            value_json, answered_stop = result
            self._take_result(value_json, answered_stop=answered_stop)
            return
        try:
            message = protocol.decode_message(line)
        except protocol.UnknownMessage:
            return  # a newer child's kind of message: nothing here acts on it
        except ValueError as error:  # orjson.JSONDecodeError is a ValueError
            self._fail(f"the child sent an invalid control message ({error}): {line[:80]!r}")
            return
        match message:
            case protocol.Ack(seq=seq) if isinstance(seq, int):
                self._on_ack(seq)
            case protocol.Checkpoint(value=value):
                self._on_checkpoint(orjson.dumps(value))
            case protocol.Spans():
                if self._on_spans is not None:
                    self._on_spans(message)
            case protocol.ThreadStacks(threads=threads) if isinstance(threads, list):
                self._on_stacks(threads)
            case protocol.Result(value=value, stopping=stopping):
                self.end_schedule = False
                self._take_result(orjson.dumps(value), answered_stop=bool(stopping))
            case protocol.Error():
                self.error, self.end_schedule = message, False
                self.traceback = str(message.traceback or "")[-MAX_TRACEBACK:]
            case protocol.Snooze(seconds=seconds):
                try:
                    self.snooze = protocol.snooze_seconds(seconds)
                except ValueError as error:  # the child is not trusted to have checked
                    self._fail(f"the child sent an invalid snooze: {error}")
                    return
                self.error, self.end_schedule = None, False
            case protocol.EndSchedule():
                self.error, self.end_schedule = None, True
            case protocol.Done():
                self._on_done()
            case protocol.Retired(reason=reason):
                self.retired = str(reason)[:MAX_RETIRED_REASON]
            # Anything else a child may send (a message meant for it) means nothing here.

    def _take_result(self, value_json: bytes, *, answered_stop: bool) -> None:
        if len(value_json) > self._max_result:
            self._fail(f"result is {len(value_json)} bytes, above max_result "
                       f"({self._max_result} bytes)")
            return
        try:
            orjson.loads(value_json)  # a child is not trusted to send valid JSON
        except orjson.JSONDecodeError as error:
            self._fail(f"the child sent a result that is not valid JSON: {error}")
            return
        self.error = None  # the last of a result and an error is what the job ended with
        self.result_json = value_json
        self.result_answered_stop = answered_stop

    def _fail(self, error: str) -> None:
        if self.protocol_error is None:
            self.protocol_error = error


class ControlWriter:
    """The one writer of a child's control socket: whole messages, in order."""

    def __init__(self, stream: Callable[[], Awaitable[anyio.abc.ByteSendStream]],
                 start: StartTask) -> None:
        self._stream = stream  # made at the first write (`Child.control`)
        self._start = start
        self._lock: anyio.Lock | None = None  # made at the first write: most jobs get none
        # A write was cut short (its job's end cancelled it): part of a line may be on
        # the socket, and a reused child could not read its next start after it.
        self.cut = False

    async def send(self, message: protocol.Message) -> None:
        """Write `message` after every message asked for before it; returns once it is
        written, or dropped because the child is gone."""
        line = protocol.encode_line(message)
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            self.cut = True
            with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await (await self._stream()).send(line)
            self.cut = False

    def stop(self, reason: str) -> anyio.Event:
        """Tell the child to stop for `reason`, without waiting for the socket; the
        event is set once the message is written (or dropped)."""
        message = protocol.Stop(reason=reason)
        written = anyio.Event()

        async def write() -> None:
            try:
                await self.send(message)
            finally:
                written.set()

        self._start(write)
        return written
