"""The job object handed to a handler, and the exceptions a handler meets."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

from sandbox import protocol


class Fail(Exception):
    """Raised by a handler: fails the job for good, without further attempts."""


class Snooze(Exception):
    """Raised by a handler: ends this run without spending an attempt; the job is pending
    again and runs `seconds` from now (by the store's clock), with the same `job.attempt`.

    `seconds` is a number from 0 to a year; anything else raises ValueError here, in the
    handler, which fails the attempt like any other error."""

    def __init__(self, seconds: float) -> None:
        self.seconds = protocol.snooze_seconds(seconds)
        super().__init__(seconds)


class EndSchedule(Exception):
    """Raised by a schedule's producer: ends its schedule, which no supervisor fires
    again until its definition in pool.toml changes (as returning the plan
    `{"end_schedule": true}` does: nothing started, nothing stopped)."""


class Stopped(BaseException):
    """Raised in a handler that never looked at `job.stopping` when SIGTERM arrives.

    A BaseException, so that a handler's `except Exception` does not swallow it.
    """


_WAKE_UP = object()


class Inbox:
    """What reaches a running job from outside: a stop request and notifications.

    Filled by the sandbox (reader thread, SIGTERM handler), read through `Job`.
    `acknowledge(seq)` is called, in the handler's thread, for each note with a
    sequence number as the handler takes it.
    """

    def __init__(self, acknowledge: Callable[[int], None] | None = None) -> None:
        self._acknowledge = acknowledge
        # Called once, on first use: the sandbox starts its reader thread only then,
        # as most handlers never look and a thread would delay every job's start.
        self.start_listening: Callable[[], None] | None = None
        self._listening_lock = threading.Lock()
        self._stop = threading.Event()
        self._notifications: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # Set by the SIGTERM handler, which must not touch the Event: its lock may be
        # held by the very thread the handler interrupted.
        self.terminated = False
        self._stop_reason: str | None = None
        self._reason_awaited = False

    def _listen(self) -> None:
        if self.start_listening is not None:
            with self._listening_lock:
                if self.start_listening is not None:
                    self.start_listening()
                    self.start_listening = None

    @property
    def stop_requested(self) -> bool:
        self._listen()
        return self.terminated or self._stop.is_set()

    @property
    def stop_seen(self) -> bool:
        """Whether a stop reached the job, without starting to listen for one."""
        return self.terminated or self._stop.is_set()

    @property
    def stop_reason(self) -> str | None:
        """Why the job is asked to stop ("stop", "drain", "rebalance", "timeout"), or
        None while it is not."""
        if not self.stop_requested:
            return None
        if self._stop_reason is None and not self._reason_awaited:
            self._reason_awaited = True  # a SIGTERM that came alone waits once
            self._stop.wait(protocol.STOP_REASON_WAIT)  # the reason may trail its SIGTERM
        return self._stop_reason or "stop"

    def request_stop(self, reason: str | None = None) -> None:
        if self._stop_reason is None and reason is not None:
            self._stop_reason = reason
        if not self._stop.is_set():
            self._stop.set()
            self._notifications.put(_WAKE_UP)

    def deliver(self, payload: Any, seq: int | None = None) -> None:
        self._notifications.put((payload, seq))

    def wait_stop(self, timeout: float | None) -> bool:
        self._listen()
        return self.terminated or self._stop.wait(timeout)

    def next_notification(self, timeout: float | None) -> Any:
        self._listen()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            block = not self.stop_requested
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                item = self._notifications.get(block=block, timeout=remaining)
            except queue.Empty:
                return None
            if item is not _WAKE_UP:
                payload, seq = item
                if seq is not None and self._acknowledge is not None:
                    self._acknowledge(seq)
                return payload


class Job:
    """What a handler receives: `run(job)`."""

    def __init__(
        self,
        *,
        key: str,
        payload: Any,
        attempt: int,
        token: int,
        inbox: Inbox,
        checkpoint: Any = None,
        save_checkpoint: Callable[[bytes], None] | None = None,
        scratch: str = "",
    ) -> None:
        self.key = key
        self.payload = payload
        self.attempt = attempt
        self.token = token
        self.checkpoint = checkpoint  # what an earlier attempt of this key saved, or None
        # A private directory for this job alone, removed with all in it when it ends.
        self.scratch = scratch
        self._inbox = inbox
        self._send_checkpoint = save_checkpoint
        self._stop_aware = False

    def save_checkpoint(self, value: Any) -> None:
        """Keep `value` (JSON-serializable) for the next attempt of this key, on any
        supervisor, as `job.checkpoint`.  It is sent to the supervisor at once, which
        stores it under the job's lease (a stale run changes nothing) before the job's
        outcome; each save replaces the last."""
        try:
            data = orjson.dumps(value)
        except (TypeError, orjson.JSONEncodeError) as error:
            raise TypeError(f"checkpoint is not JSON-serializable: {error}") from error
        self.checkpoint = value
        if self._send_checkpoint is not None:
            self._send_checkpoint(data)

    @property
    def stop_aware(self) -> bool:
        """True once the handler looked for stop requests; SIGTERM then leaves it alone."""
        return self._stop_aware

    @property
    def stopping(self) -> bool:
        """True once a graceful stop was asked for."""
        self._stop_aware = True
        return self._inbox.stop_requested

    @property
    def stop_reason(self) -> str | None:
        """None, or why a stop was asked for: "stop" (a user), "drain" (the supervisor
        shuts down), "rebalance" (the job moves to another supervisor) or "timeout".
        After a drain or a move the job runs again elsewhere, without spending an
        attempt, even if the handler returns a value in answer to the stop."""
        self._stop_aware = True
        return self._inbox.stop_reason

    def wait_stop(self, timeout: float | None = None) -> bool:
        """Block up to `timeout` seconds for a stop request; True if one came."""
        self._stop_aware = True
        return self._inbox.wait_stop(timeout)

    def next_notification(self, timeout: float | None = None) -> Any:
        """The next notify payload, or None after `timeout` or once stopping."""
        return self._inbox.next_notification(timeout)

    def __repr__(self) -> str:
        return f"<Job key={self.key!r} attempt={self.attempt} token={self.token}>"
