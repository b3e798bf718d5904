"""A running job's checkpoints: the latest value its handler saved goes to the store,
under the job's lease, and is stored before the job's outcome, so that the next
attempt of the key (after a drain, a move, a crash or a retry) resumes from it."""

from __future__ import annotations

import contextlib
import logging

import anyio

from supervisor.errors import StaleToken, StoreFailure
from supervisor.running import RunningJob
from supervisor.store.base import Store
from supervisor.store_failures import StoreFailures

log = logging.getLogger("poolsup.jobs")


class CheckpointKeeper:
    def __init__(
        self, job: RunningJob, store: Store, failures: StoreFailures, *, max_bytes: int
    ) -> None:
        self._job = job
        self._store = store
        self._failures = failures
        self._max_bytes = max_bytes
        self._latest: bytes | None = None
        self._stored: bytes | None = None
        self._saved = anyio.Event()

    def offer(self, value_json: bytes) -> None:
        """The handler saved `value_json` (called for each checkpoint the child sends)."""
        if len(value_json) > self._max_bytes:
            log.error("[%s] checkpoint of %d bytes ignored: above max_payload (%d bytes) "
                      "(token %d)", self._job.key, len(value_json), self._max_bytes,
                      self._job.token)
            return
        self._latest = value_json
        self._saved.set()

    async def run(self) -> None:
        while True:
            await self._saved.wait()
            self._saved = anyio.Event()
            try:
                await self._store_latest()
            except StoreFailure as error:
                await anyio.sleep(self._failures.failed(error))
                self._saved.set()
            except StaleToken:
                return  # the lease is gone; the renewal that finds out stops the job

    async def flush(self) -> None:
        """Store what is not stored yet, once, if the store answers."""
        # If not, the next attempt resumes from the last checkpoint that was stored.
        with contextlib.suppress(StoreFailure, StaleToken):
            await self._store_latest()

    async def _store_latest(self) -> None:
        latest = self._latest
        if latest is None or latest is self._stored:
            return
        await self._store.save_checkpoint(self._job.lease, latest)
        self._failures.succeeded()
        self._stored = latest
