"""The supervisor's log: records go through a bounded queue to a thread that writes
stderr, so a stalled reader (journald, a full pipe) never blocks the event loop that
renews leases.  Past the bound, records are dropped and counted, never waited for.

A record whose arguments cannot change (strings, numbers) is formatted by the thread,
off the event loop; any other is formatted before it is queued
(`QueueHandler.prepare`), from its arguments as they were when logged.

The thread wakes at a record, lets the records of the next BATCH_WAIT join it, and
writes them in one write: a busy supervisor (a line per finished job) wakes it and
switches to it once per batch, not once per line."""

from __future__ import annotations

import logging
import logging.handlers
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TextIO

from supervisor.service.log_format import formatter_for, stderr_is_journal

QUEUE_SIZE = 10_000
BATCH_WAIT = 0.02  # seconds the writer waits, once woken, for more lines to write with it
_UNCHANGING = (str, int, float, bool, type(None))
_LINE = "poolsup_line"  # a record formatted before it was queued carries its line here


def _unchanging(args: object) -> bool:
    return not args or (
        isinstance(args, tuple) and all(type(arg) in _UNCHANGING for arg in args)
    )


class _WriterFormatter(logging.Formatter):
    """Formats in the writer thread what was queued unformatted."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self._inner = inner

    def format(self, record: logging.LogRecord) -> str:
        line = getattr(record, _LINE, None)
        return line if line is not None else self._inner.format(record)


class _DroppingQueueHandler(logging.handlers.QueueHandler):
    """Queues records for the writer thread, dropping them past QUEUE_SIZE.  The queue is
    a SimpleQueue (its put is C code with no Python-level condition to notify: a queue.Queue
    put cost the event loop 13% of its time in a profile of reused children)."""

    def __init__(self, records: queue.SimpleQueue[logging.LogRecord]) -> None:
        super().__init__(records)
        self._records = records
        self.dropped = 0

    def handle(self, record: logging.LogRecord) -> bool:
        """`Handler.handle` without its lock: the queue is safe from any thread, and a
        count of dropped records lost to a race is no harm."""
        if self.filters and not self.filter(record):
            return False
        self.emit(record)
        return True

    def enqueue(self, record: logging.LogRecord) -> None:
        if self._records.qsize() >= QUEUE_SIZE:
            self.dropped += 1
            return
        if self.dropped:
            self._records.put_nowait(self.prepare(self._dropped_record()))
            self.dropped = 0
        self._records.put_nowait(record)

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        if (isinstance(record.msg, str) and record.exc_info is None
                and record.stack_info is None and _unchanging(record.args)):
            return record
        prepared: logging.LogRecord = super().prepare(record)
        setattr(prepared, _LINE, prepared.msg)
        return prepared

    def _dropped_record(self) -> logging.LogRecord:
        return logging.LogRecord(
            "poolsup.log", logging.WARNING, __file__, 0,
            f"{self.dropped} log record(s) dropped: stderr was not read fast enough",
            None, None,
        )


_STOP = logging.LogRecord("poolsup.log", logging.INFO, __file__, 0, "", None, None)


class _Writer:
    """The thread that writes the queued records with `handler`'s format to its stream,
    a batch at a time."""

    def __init__(self, records: queue.SimpleQueue[logging.LogRecord],
                 handler: logging.StreamHandler[TextIO]) -> None:
        self._records = records
        self._handler = handler
        self._thread = threading.Thread(target=self._run, name="poolsup-log", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Write what is queued, then end the thread."""
        self._records.put_nowait(_STOP)
        self._thread.join()

    def _run(self) -> None:
        records = self._records
        while True:
            batch = [records.get()]
            if batch[0] is not _STOP:
                time.sleep(BATCH_WAIT)
            with suppress(queue.Empty):
                while True:
                    batch.append(records.get_nowait())
            if self._write(batch):
                return

    def _write(self, batch: list[logging.LogRecord]) -> bool:
        """Write the batch's lines at once; whether it held the end of the log."""
        handler, lines, last = self._handler, [], None
        for record in batch:
            if record is _STOP:
                continue
            try:
                lines.append(handler.format(record) + handler.terminator)
                last = record
            except Exception:
                handler.handleError(record)
        if last is not None:
            try:
                handler.stream.write("".join(lines))
                handler.flush()
            except Exception:
                handler.handleError(last)
        return any(record is _STOP for record in batch)


@contextmanager
def logging_to_stderr(level: str, log_format: str = "text") -> Iterator[None]:
    """Route every log record to stderr through the queue until the block ends (then
    flush what is left), as `log_format` ("text" or "json") lines."""
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    journal = stderr_is_journal(os.environ, sys.stderr)
    formatter = formatter_for(log_format, journal=journal)
    writer = logging.StreamHandler(sys.stderr)
    writer.setFormatter(_WriterFormatter(formatter))
    listener = _Writer(records, writer)
    root = logging.getLogger()
    root.setLevel(level.upper())
    handler = _DroppingQueueHandler(records)
    handler.setFormatter(formatter)
    # No line shows the caller's file or function, its thread or its process: skip
    # looking them up for each record.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    root.addHandler(handler)
    listener.start()
    try:
        yield
    finally:
        root.removeHandler(handler)
        listener.stop()
