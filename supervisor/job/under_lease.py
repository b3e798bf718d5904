"""What a running job keeps current in the store under its lease: the last checkpoint its
handler saved, and the notes - from the store to its child, and the highest one its
handler took back to the store.

Each is written under the job's lease (fenced by its token) and, at the job's end, once
more before its outcome (`flush`), so that the next attempt of the key (after a drain, a
move, a crash or a retry) resumes from the last checkpoint and gets the notes its handler
never took, in order: delivery is at least once.

Most jobs make no checkpoint and get no note: the task that writes one starts with the
first offer, and the courier's with the first note waiting for the job.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio
import orjson

from sandbox import protocol
from supervisor.doorbell import Doorbell
from supervisor.errors import StaleToken, StoreFailure
from supervisor.job.running import RunningJob, StartTask
from supervisor.observe.store_failures import StoreFailures
from supervisor.store.base import Store

T = TypeVar("T")


class LatestWrite(Generic[T]):
    """One value a running job keeps current in the store: each offer replaces the one
    before, a background task (started by the first offer) writes the newest, retrying
    while the store fails, and `flush` tries once more when the job ends.  A write
    refused for a stale lease ends the task: the renewal that finds out stops the job."""

    def __init__(
        self, write: Callable[[T], Awaitable[None]], failures: StoreFailures, start: StartTask
    ) -> None:
        self._write = write
        self._failures = failures
        self._start: StartTask | None = start
        self._latest: T | None = None
        self._offered = 0  # offers so far
        self._written = 0  # the offer count the store has the value of
        self._waiting = Doorbell()

    @property
    def latest(self) -> T | None:
        return self._latest

    @property
    def unwritten(self) -> bool:
        """An offer the store does not have yet (what `flush` would write)."""
        return self._latest is not None and self._offered != self._written

    def offer(self, value: T) -> None:
        self._latest = value
        self._offered += 1
        self._waiting.ring()
        if self._start is not None:
            start, self._start = self._start, None
            start(self._run)

    async def _run(self) -> None:
        while True:
            await self._waiting.wait()
            try:
                await self._write_latest()
            except StoreFailure as error:
                await anyio.sleep(self._failures.failed(error))
                self._waiting.ring()
            except StaleToken:
                return

    async def flush(self) -> None:
        """Write what is not written yet, once, if the store answers."""
        with contextlib.suppress(StoreFailure, StaleToken):
            await self._write_latest()

    async def _write_latest(self) -> None:
        offered, latest = self._offered, self._latest
        if latest is None or offered == self._written:
            return
        await self._write(latest)
        self._failures.succeeded()
        self._written = max(self._written, offered)


class CheckpointKeeper(LatestWrite[bytes]):
    """The job's last checkpoint, stored before its outcome."""

    def __init__(
        self, job: RunningJob, store: Store, failures: StoreFailures, *, max_bytes: int,
        start: StartTask,
    ) -> None:
        super().__init__(lambda value: store.save_checkpoint(job.lease, value), failures, start)
        self._job = job
        self._max_bytes = max_bytes

    def offer(self, value: bytes) -> None:
        """The handler saved `value` (called for each checkpoint the child sends); one
        over the size limit is logged and ignored.  If the store never takes it, the
        next attempt resumes from the last checkpoint that was stored."""
        if len(value) > self._max_bytes:
            self._job.log.error("checkpoint of %d bytes ignored: above max_payload (%d bytes)",
                                len(value), self._max_bytes)
            return
        super().offer(value)


class NoteCourier:
    """The job's notes: from the store to its child, and the acknowledgements back.  A
    note stays in the store until the handler has taken it (the child acknowledges it by
    its seq), so a run that ends first - a drain, a fence, a crash - leaves it to the
    next run of the key."""

    def __init__(
        self,
        job: RunningJob,
        store: Store,
        send: Callable[[protocol.Message], Awaitable[None]],
        failures: StoreFailures,
        start: StartTask,
    ) -> None:
        self._job = job
        self._store = store
        self._send = send
        self._failures = failures
        self._start: StartTask | None = start
        self._delivered = 0  # the highest seq sent to the child
        # The highest seq the handler took; removing up to it from the store.
        self._taken: LatestWrite[int] = LatestWrite(
            lambda seq: store.ack_notifications(job.lease, seq), failures, start)
        self.check()  # notes sent while it was pending

    def check(self) -> None:
        """Start delivering once a note waits for the job (the runner calls this when
        the job's `wake` rang); once started, the courier follows `notes_waiting`."""
        job = self._job
        if self._start is not None and (job.claimed.has_notes or job.notes_waiting.rang):
            start, self._start = self._start, None
            start(self._deliver)

    def acknowledged(self, seq: int) -> None:
        """The handler took note `seq` (called for each ack the child sends)."""
        if seq > (self._taken.latest or 0):
            self._taken.offer(seq)

    @property
    def unwritten(self) -> bool:
        """The handler took a note the store still holds."""
        return self._taken.unwritten

    async def flush(self) -> None:
        """Remove what the handler took from the store, once, if the store answers;
        if not, the next run gets those notes again: at least once."""
        await self._taken.flush()

    async def _deliver(self) -> None:
        job = self._job
        job.notes_waiting.ring()
        while True:
            await job.notes_waiting.wait()
            try:
                notes = await self._store.take_notifications(job.lease, self._delivered)
            except StoreFailure as error:
                await anyio.sleep(self._failures.failed(error))
                job.notes_waiting.ring()
                continue
            self._failures.succeeded()
            for note in notes:
                await self._send(protocol.Notify(seq=note.seq,
                                                 payload=orjson.Fragment(note.payload)))
                self._delivered = note.seq
