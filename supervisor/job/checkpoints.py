"""A running job's checkpoints: the latest value its handler saved goes to the store,
under the job's lease, and is stored before the job's outcome, so that the next
attempt of the key (after a drain, a move, a crash or a retry) resumes from it."""

from __future__ import annotations

from supervisor.job.latest_write import LatestWrite, StartTask
from supervisor.job.running import RunningJob
from supervisor.observe.store_failures import StoreFailures
from supervisor.store.base import Store


class CheckpointKeeper(LatestWrite[bytes]):
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
