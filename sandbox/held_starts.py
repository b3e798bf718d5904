"""The fork server's report that a one-job child started (`spawned`, its pid), held a
moment: a short job's start and exit then reach the supervisor together, one wake-up of
its loop instead of two. Nothing waits for it: the supervisor does not wait for the
pid to run the job (`ForkServerClient.start`), and shows it at the next renewal."""

from __future__ import annotations

from sandbox.protocol import Spawned

START_HOLD = 0.005  # seconds a start report waits for its job's exit, at most


class HeldStarts:
    """Start reports waiting for their job's exit, oldest first (each held as long, so
    the oldest is the first due). Times are on the fence clock."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[float, Spawned]] = {}

    def hold(self, report: Spawned, now: float) -> None:
        self._held[report.job] = (now + START_HOLD, report)

    def take(self, job_id: str) -> Spawned | None:
        """The job's report, if still held: its exit is about to be sent."""
        held = self._held.pop(job_id, None)
        return None if held is None else held[1]

    def due(self, now: float) -> list[Spawned]:
        """The reports whose hold ran out by `now`, to send alone."""
        ended = []
        for job_id, (until, _) in self._held.items():
            if until > now:
                break
            ended.append(job_id)
        return [self._held.pop(job_id)[1] for job_id in ended]

    def take_all(self) -> list[Spawned]:
        reports = [report for _, report in self._held.values()]
        self._held.clear()
        return reports

    def next_due(self) -> float | None:
        return next(iter(self._held.values()))[0] if self._held else None
