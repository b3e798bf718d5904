"""A running job's output kept in the store for `poolsup logs`: the raw bytes its
child printed (stdout and stderr, one socket) go to the store in batches, and the last
batch before the job's outcome is stored, so that what `logs` shows after the end is
complete.

A batch is written at most BATCH_INTERVAL after its first byte was printed, or as soon
as BATCH_BYTES are waiting (but not more often than every MIN_GAP), from a task started
for that write only: at most one write of a job is in flight, and none holds up the
lease renewals, which never wait for it.  While the store is slow or failing, only the
newest `max_bytes` wait in memory; the older ones are dropped and the store counts them
as printed but not kept.  Writes carry the offset of their first byte, so a write sent
again (its reply lost, or cut short at the job's end) is not kept twice."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import anyio

from supervisor.errors import JobNotFound, StaleToken, StoreFailure
from supervisor.job.running import RunningJob, StartTask
from supervisor.observe.store_failures import StoreFailures
from supervisor.store.base import Store

BATCH_INTERVAL = 0.5
BATCH_BYTES = 65536
MIN_GAP = 0.05
FINAL_WAIT = 1.0  # for the last write, at the job's end


class OutputKeeper:
    def __init__(
        self, job: RunningJob, store: Store, failures: StoreFailures, *, max_bytes: int,
        start: StartTask, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._job = job
        self._store = store
        self._failures = failures
        self._max_bytes = max_bytes
        self._start = start
        self._clock = clock
        self._buffer = bytearray()  # the newest bytes not yet known to be stored
        self._printed = 0  # bytes the run printed so far
        self._stored = 0  # the store has what the run printed up to here
        self.dropped = 0  # bytes the store never got
        self._batch_done: anyio.Event | None = None  # the last batch's write: set when it ends
        self._closed = False
        self._refused = False  # the store takes no more of this run's output
        self._last_start = clock()
        self._retry_at = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = 0.0

    @property
    def _writing(self) -> bool:
        return self._batch_done is not None and not self._batch_done.is_set()

    def feed(self, chunk: bytes) -> None:
        """What the child printed (called by the output socket's reader)."""
        self._printed += len(chunk)
        self._buffer += chunk
        if len(self._buffer) > self._max_bytes:
            del self._buffer[:len(self._buffer) - self._max_bytes]
        self._schedule()

    def close(self) -> None:
        """No more batches: the run's end is near (its child exited)."""
        self._closed = True
        self._cancel_timer()

    async def finish(self) -> None:
        """The run's end: write what is left, marked as its last, within FINAL_WAIT,
        after the batch in flight (so the last write is the last to reach the store).
        Also for a run whose lease was lost: its tail is worth reading."""
        self.close()
        if self._batch_done is None and not self._printed:
            return  # it printed nothing: nothing to write or wait for
        with anyio.move_on_after(FINAL_WAIT):
            if self._batch_done is not None:
                await self._batch_done.wait()
            if self._printed and not self._refused:
                with contextlib.suppress(StoreFailure, StaleToken, JobNotFound):
                    await self._write(ended=True)
        if self.dropped or self._printed > self._stored:
            self._job.log.warning("%d byte(s) of output not stored: the store lagged behind",
                                  self.dropped + self._printed - self._stored)

    def _schedule(self) -> None:
        if self._writing or self._closed or self._refused or self._printed == self._stored:
            return
        gap = MIN_GAP if len(self._buffer) >= BATCH_BYTES else BATCH_INTERVAL
        due = max(self._last_start + gap, self._retry_at)
        now = self._clock()
        if due <= now:
            self._cancel_timer()
            self._batch_done = anyio.Event()
            self._last_start = now
            self._start(self._write_batch)
        elif self._timer is None or due < self._timer_due:
            self._cancel_timer()
            self._timer_due = due
            self._timer = asyncio.get_running_loop().call_later(due - now, self._ring)

    def _ring(self) -> None:
        self._timer = None
        self._schedule()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def _write_batch(self) -> None:
        try:
            await self._write(ended=False)
            self._failures.succeeded()
        except StoreFailure as error:
            self._retry_at = self._clock() + self._failures.failed(error)
        except (StaleToken, JobNotFound):
            self._refused = True  # dispatched again, or its record is gone
        finally:
            if self._batch_done is not None:
                self._batch_done.set()
            self._schedule()

    async def _write(self, *, ended: bool) -> None:
        first = self._printed - len(self._buffer)  # the offset of the buffer's first byte
        at = max(first, self._stored)
        data, end = bytes(self._buffer[at - first:]), self._printed
        await self._store.append_output(self._job.lease, self._job.claimed.attempt, data,
                                        at=at, max_bytes=self._max_bytes, ended=ended)
        if at > self._stored:
            self.dropped += at - self._stored
        self._stored = max(self._stored, end)
        first = self._printed - len(self._buffer)
        if end > first:
            del self._buffer[:end - first]
