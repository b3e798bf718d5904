"""How the supervisor's log lines read: `text` (the default) or `json`, one object per
line.  In the journal, text lines carry no timestamp (journald stamps every line) and
every line starts with its syslog priority (`<4>`), which journald strips and keeps,
so `journalctl -p warning` works.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import IO, Any

import orjson

from supervisor.observe.job_log import ABOUT, JobRef

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
JOURNAL_FORMAT = "%(levelname)s %(name)s: %(message)s"
LOG_FORMATS = ("text", "json")


def _syslog_priority(levelno: int) -> int:
    if levelno >= logging.CRITICAL:
        return 2
    if levelno >= logging.ERROR:
        return 3
    if levelno >= logging.WARNING:
        return 4
    if levelno >= logging.INFO:
        return 6
    return 7


def job_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The `key` and `token` of the job a record is about (either may be missing): its
    `JobLog`'s, or the ones it was given as `extra`."""
    about: JobRef | None = getattr(record, ABOUT, None)
    if about is not None:
        return {"key": about.key} if about.token is None else {"key": about.key,
                                                               "token": about.token}
    return {name: getattr(record, name) for name in ("key", "token") if hasattr(record, name)}


def message_of(record: logging.LogRecord) -> str:
    """The record's message; a line about a job shows its key and token."""
    message = record.getMessage()
    about: JobRef | None = getattr(record, ABOUT, None)
    return message if about is None else about.line(message)


class TextFormatter(logging.Formatter):
    """logging's own, but for lines about a job (`message_of`), and its time of day
    made once a second (a line per finished job)."""

    _second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        if self._second[0] != second:
            self._second = (second, time.strftime(self.default_time_format,
                                                  self.converter(record.created)))
        text = self._second[1]
        return self.default_msec_format % (text, record.msecs) if self.default_msec_format \
            else text

    def formatMessage(self, record: logging.LogRecord) -> str:
        about: JobRef | None = getattr(record, ABOUT, None)
        if about is not None:
            record.message = about.line(record.message)
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": record.created,
            "level": record.levelname,
            "logger": record.name,
            "message": message_of(record),
            **job_fields(record),
        }
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class JournalFormatter(logging.Formatter):
    """Prefixes each line of a record with its syslog priority."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self._inner = inner

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{_syslog_priority(record.levelno)}>"
        return prefix + self._inner.format(record).replace("\n", "\n" + prefix)


def formatter_for(log_format: str, *, journal: bool) -> logging.Formatter:
    if log_format == "json":
        formatter: logging.Formatter = JsonFormatter()
    else:
        formatter = TextFormatter(JOURNAL_FORMAT if journal else TEXT_FORMAT)
    return JournalFormatter(formatter) if journal else formatter


def stderr_is_journal(environ: Mapping[str, str], stream: IO[Any]) -> bool:
    """Whether `stream` is the journal stream systemd connected, as `$JOURNAL_STREAM`
    (`DEVICE:INODE`) names it; a redirected stderr is not (systemd.exec(5))."""
    device, _, inode = environ.get("JOURNAL_STREAM", "").partition(":")
    try:
        stat = os.fstat(stream.fileno())
        return (stat.st_dev, stat.st_ino) == (int(device), int(inode))
    except (OSError, ValueError):
        return False
