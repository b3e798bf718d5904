"""A child's control messages as the supervisor reads them: bounded, in linear time.

The child sends newline-delimited JSON: a result, an error or a snooze at the end, an
acknowledgement for each notification its handler took, and the checkpoints it saved.
A result larger than `max_result`, or bytes that are not a message, are a protocol
error that fails the attempt; they never end the job's supervision.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import orjson

from sandbox import protocol
from supervisor.core.outcome import ChildExit

if TYPE_CHECKING:
    from supervisor.forks.fork_client import ExitStatus

MAX_TRACEBACK = 8192
# Room for an error message and its traceback on top of a result's own limit.
MESSAGE_OVERHEAD = 1024 * 1024
# What the child writes before a returned value (sandbox.child sends it this way), so
# the value's JSON can be kept as it came, without decoding and encoding it again;
# by whether the handler returned after a stop had reached it.
RESULT_PREFIXES = {
    b'{"t":"result","stopping":false,"value":': False,
    b'{"t":"result","stopping":true,"value":': True,
}


class ControlReader:
    """Reads one child's control socket until it closes."""

    def __init__(
        self,
        stream: anyio.abc.ByteReceiveStream,
        *,
        max_result: int,
        on_ack: Callable[[int], None],
        on_checkpoint: Callable[[bytes], None],
        on_stacks: Callable[[list[dict[str, Any]]], None] = lambda stacks: None,
        on_spans: Callable[[dict[str, Any]], None] | None = None,  # a traced job's
    ) -> None:
        self._stream = stream
        self._max_result = max_result
        self._max_line = max_result + MESSAGE_OVERHEAD
        self._on_ack = on_ack
        self._on_checkpoint = on_checkpoint
        self._on_stacks = on_stacks
        self._on_spans = on_spans
        self._buffer = bytearray()
        self._skipping = 0  # bytes of an over-long line being skipped, 0 when none
        self._skipping_result = False
        self.last_message: dict[str, object] | None = None
        self.result_json: bytes | None = None
        self.result_answered_stop = False
        self.snooze: float | None = None  # the handler raised sandbox.Snooze(this)
        self.end_schedule = False  # a producer raised sandbox.EndSchedule
        self.traceback = ""
        self.protocol_error: str | None = None
        self.closed = anyio.Event()

    def exit_report(self, status: ExitStatus | None) -> ChildExit:
        """How the child ended: what it said here, and how the fork server saw it exit."""
        return ChildExit(
            message=self.last_message,
            result_json=self.result_json,
            exit_code=status.code if status else None,
            exit_signal=status.signal if status else None,
            fenced=status.fenced if status else False,
            reason=status.reason if status else None,
            protocol_error=self.protocol_error,
            answered_stop=self.result_answered_stop,
            snooze=self.snooze,
            end_schedule=self.end_schedule,
        )

    async def run(self) -> None:
        try:
            while True:
                self.feed(await self._stream.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            self.closed.set()

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
        for prefix, answered_stop in RESULT_PREFIXES.items():
            if line.startswith(prefix) and line.endswith(b"}"):
                self._take_result(line[len(prefix) : -1], answered_stop=answered_stop)
                return
        try:
            message = protocol.decode(line)
        except ValueError as error:  # orjson.JSONDecodeError is a ValueError
            self._fail(f"the child sent an invalid control message ({error}): {line[:80]!r}")
            return
        kind = message.get("t")
        if kind == protocol.MSG_ACK:
            seq = message.get("seq")
            if isinstance(seq, int):
                self._on_ack(seq)
            return
        if kind == protocol.MSG_CHECKPOINT:
            self._on_checkpoint(orjson.dumps(message.get("value")))
            return
        if kind == protocol.MSG_SPANS:
            if self._on_spans is not None:
                self._on_spans(message)
            return
        if kind == protocol.MSG_STACKS:
            threads = message.get("threads")
            if isinstance(threads, list):
                self._on_stacks(threads)
            return
        if kind == protocol.MSG_SNOOZE:
            try:
                self.snooze = protocol.snooze_seconds(message.get("seconds"))
            except ValueError as error:  # the child is not trusted to have checked
                self._fail(f"the child sent an invalid snooze: {error}")
                return
        self.end_schedule = kind == protocol.MSG_END_SCHEDULE
        self.last_message = message
        if kind == protocol.MSG_RESULT:
            self._take_result(orjson.dumps(message.get("value")),
                              answered_stop=bool(message.get("stopping")))
        elif kind == protocol.MSG_ERROR:
            self.traceback = str(message.get("traceback") or "")[-MAX_TRACEBACK:]

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
        self.last_message = {"t": protocol.MSG_RESULT}
        self.result_json = value_json
        self.result_answered_stop = answered_stop

    def _fail(self, error: str) -> None:
        if self.protocol_error is None:
            self.protocol_error = error
