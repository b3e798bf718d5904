"""The supervisor's log: records go through a bounded queue to a thread that writes
stderr, so a stalled reader (journald, a full pipe) never blocks the event loop that
renews leases.  Past the bound, records are dropped and counted, never waited for.

Records are formatted before they are queued (`QueueHandler.prepare`), from their own
arguments, as they were when logged; the thread only writes the lines."""

from __future__ import annotations

import logging
import logging.handlers
import os
import queue
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from supervisor.log_format import formatter_for, stderr_is_journal

QUEUE_SIZE = 10_000


class _DroppingQueueHandler(logging.handlers.QueueHandler):
    def __init__(self, records: queue.Queue[logging.LogRecord]) -> None:
        super().__init__(records)
        self.dropped = 0

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            if self.dropped:
                self.queue.put_nowait(self.prepare(self._dropped_record()))
                self.dropped = 0
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1

    def _dropped_record(self) -> logging.LogRecord:
        return logging.LogRecord(
            "poolsup.log", logging.WARNING, __file__, 0,
            f"{self.dropped} log record(s) dropped: stderr was not read fast enough",
            None, None,
        )


@contextmanager
def logging_to_stderr(level: str, log_format: str = "text") -> Iterator[None]:
    """Route every log record to stderr through the queue until the block ends (then
    flush what is left), as `log_format` ("text" or "json") lines."""
    records: queue.Queue[logging.LogRecord] = queue.Queue(QUEUE_SIZE)
    writer = logging.StreamHandler(sys.stderr)
    writer.setFormatter(logging.Formatter("%(message)s"))
    listener = logging.handlers.QueueListener(records, writer)
    root = logging.getLogger()
    root.setLevel(level.upper())
    handler = _DroppingQueueHandler(records)
    journal = stderr_is_journal(os.environ, sys.stderr)
    handler.setFormatter(formatter_for(log_format, journal=journal))
    root.addHandler(handler)
    listener.start()
    try:
        yield
    finally:
        root.removeHandler(handler)
        listener.stop()
