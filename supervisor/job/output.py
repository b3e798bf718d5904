"""A child's stdout and stderr: into the log line by line, bounded, with a kept tail."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

output_log = logging.getLogger("poolsup.output")

MAX_LINE = 4096  # bytes of one line that reach the log
LINES_PER_SECOND = 200  # sustained rate per job
BURST = 1000  # lines a job may print at once before the rate applies
TAIL_LINES = 20  # last lines kept for the job record
TAIL_BYTES = 8192


class OutputPump:
    """What a child prints, fed by its output socket's reader (`channel.SocketFeed`).

    A token bucket bounds how many lines per second reach the log, so a noisy handler
    cannot flood the journal; lines over the budget are counted and reported, not
    logged.  The last lines are kept whatever the rate, for the job's error record.
    """

    def __init__(
        self,
        key: str,
        *,
        token: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._key = key
        # The job's token rides along as a field (the JSON log's `token`): the text line
        # stays as the handler printed it.
        self._about = {"key": key} if token is None else {"key": key, "token": token}
        self._clock = clock
        self._tail: deque[bytes] = deque(maxlen=TAIL_LINES)
        self._pending = b""
        self._tokens = float(BURST)
        self._refilled_at = clock()
        self.suppressed = 0
        self.total_bytes = 0

    def flush(self) -> None:
        if self._pending:
            self._line(self._pending)
            self._pending = b""
        self._report_suppressed()

    def tail(self) -> str:
        text = b"\n".join(self._tail).decode(errors="replace")
        return text[-TAIL_BYTES:]

    def feed(self, chunk: bytes) -> None:
        self.total_bytes += len(chunk)
        data = self._pending + chunk
        *lines, self._pending = data.split(b"\n")
        if len(self._pending) > MAX_LINE:
            lines.append(self._pending)
            self._pending = b""
        self._refill()
        if self._tokens < 1 and len(lines) > TAIL_LINES:
            # Over budget: keep the tail, count the rest, skip per-line work.
            self.suppressed += len(lines)
            self._tail.extend(line[:MAX_LINE] for line in lines[-TAIL_LINES:])
            return
        for line in lines:
            self._line(line)

    def _line(self, line: bytes) -> None:
        line = line[:MAX_LINE]
        self._tail.append(line)
        if self._tokens >= 1:
            self._tokens -= 1
            self._report_suppressed()
            output_log.info("[%s] %s", self._key, line.decode(errors="replace"),
                            extra=self._about)
        else:
            self.suppressed += 1

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(BURST, self._tokens + (now - self._refilled_at) * LINES_PER_SECOND)
        self._refilled_at = now

    def _report_suppressed(self) -> None:
        """Say how many lines were dropped, once logging resumes (or at the end)."""
        if self.suppressed:
            output_log.warning(
                "[%s] %d output line(s) not logged: over %d lines/s",
                self._key, self.suppressed, LINES_PER_SECOND, extra=self._about,
            )
            self.suppressed = 0
