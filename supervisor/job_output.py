"""A job's output as its readers see it (`poolsup logs`, `AsyncClient.logs`, the
dashboard): one `AttemptOutput` per run of the job, and a follower that reads on from
where it was, for `logs --follow`.

A run is one claim of the job: an attempt that a drain or a move released runs again
under the same attempt number, so one attempt may show as two runs, each with its own
supervisor."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from supervisor.errors import AttemptNotFound
from supervisor.store.base import Store
from supervisor.store.records import FINISHED_STATES, RunOutput


@dataclass(frozen=True, kw_only=True)
class AttemptOutput:
    """What one run printed (stdout and stderr together), the newest `max_log` bytes of
    it: `dropped_bytes` were printed before those and are no longer kept."""

    attempt: int
    supervisor: str
    text: str  # decoded as UTF-8, undecodable bytes replaced
    dropped_bytes: int
    ended: bool
    token: int


def attempt_output(run: RunOutput) -> AttemptOutput:
    return AttemptOutput(attempt=run.attempt, supervisor=run.supervisor,
                         text=run.data.decode(errors="replace"), dropped_bytes=run.kept_from,
                         ended=run.ended, token=run.token)


def of_attempt(key: str, runs: Sequence[RunOutput], attempt: int | None) -> list[RunOutput]:
    """The runs of `attempt` (None: all).  Raises `AttemptNotFound` if it has none."""
    if attempt is None:
        return list(runs)
    chosen = [run for run in runs if run.attempt == attempt]
    if not chosen:
        raise AttemptNotFound(f"job {key!r} has no output of attempt {attempt} "
                              f"(attempts with output: {_attempts(runs)})")
    return chosen


def _attempts(runs: Sequence[RunOutput]) -> str:
    return ", ".join(str(n) for n in sorted({run.attempt for run in runs})) or "none"


class OutputFollower:
    """Reads a job's output on from where the last read ended.  `read` returns each run's
    new bytes (a run not seen before in full, as far as it is kept) and whether the job
    has finished: then every run's output has been read (a supervisor writes a run's
    last output before the job's outcome)."""

    def __init__(self, store: Store, key: str, attempt: int | None = None) -> None:
        self._store = store
        self._key = key
        self._attempt = attempt
        self._offsets: dict[int, int] = {}

    async def read(self) -> tuple[list[RunOutput], bool]:
        finished = (await self._store.job(self._key)).state in FINISHED_STATES
        runs = everyone = await self._store.output(self._key, self._offsets)
        if self._attempt is not None:
            runs = [run for run in everyone if run.attempt == self._attempt]
            if finished and not runs and not self._offsets:  # so `everyone` is whole
                of_attempt(self._key, everyone, self._attempt)
        new = [run for run in runs
               if run.data or run.token not in self._offsets]
        for run in runs:
            self._offsets[run.token] = max(run.start + len(run.data),
                                           self._offsets.get(run.token, 0))
        return new, finished
