"""Notifications of one running job: from the store to its child, acknowledgements back.

A note stays in the store until the handler has taken it (the child acknowledges it by
its seq), so a run that ends first - a drain, a fence, a crash - leaves it to the next
run of the key, in order: delivery is at least once.

Most jobs get no notes: the courier's tasks start with the first note waiting for the
job, or the first the handler takes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import orjson

from sandbox import protocol
from supervisor.errors import StoreFailure
from supervisor.job.latest_write import LatestWrite, StartTask
from supervisor.job.running import RunningJob
from supervisor.observe.store_failures import StoreFailures
from supervisor.store.base import Store


class NoteCourier:
    def __init__(
        self,
        job: RunningJob,
        store: Store,
        send: Callable[[dict[str, object]], Awaitable[None]],
        failures: StoreFailures,
        start: StartTask,
    ) -> None:
        self._job = job
        self._store = store
        self._send = send
        self._failures = failures
        self._delivered = 0  # the highest seq sent to the child
        # The highest seq the handler took; removing up to it from the store.
        self._taken: LatestWrite[int] = LatestWrite(
            lambda seq: store.ack_notifications(job.lease, seq), failures, start)
        if job.claimed.has_notes or job.notes_waiting.rang:
            start(self._deliver)  # notes sent while it was pending
        else:
            job.on_first_note(lambda: start(self._deliver))

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
                await self._send({"t": protocol.MSG_NOTIFY, "seq": note.seq,
                                  "payload": orjson.Fragment(note.payload)})
                self._delivered = note.seq
