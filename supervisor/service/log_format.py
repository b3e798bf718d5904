"""How the supervisor's log lines read: `text` (the default) or `json`, one object per
line.  In the journal, text lines carry no timestamp (journald stamps every line) and
every line starts with its syslog priority (`<4>`), which journald strips and keeps,
so `journalctl -p warning` works.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import IO, Any

import orjson

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
JOURNAL_FORMAT = "%(levelname)s %(name)s: %(message)s"
LOG_FORMATS = ("text", "json")

# Job lines read `[KEY] ... (token N)` (or `... token N ...`).  Until the job log calls
# pass `extra={"key": ..., "token": ...}`, the JSON formatter reads them from the
# format string and its arguments, which is exact whatever the key holds.
_CONVERSION = re.compile(r"%[-#0 +\d.]*[a-zA-Z%]")
_KEY_PREFIX = "[%s] "
_TOKEN_MARK = re.compile(r"\btoken %d")
_FORMATTED_KEY = re.compile(r"\[([^\]]+)\] ")
_FORMATTED_TOKEN = re.compile(r"\btoken (\d+)")


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
    """The `key` and `token` of the job a record is about (either may be missing)."""
    fields: dict[str, Any] = {
        name: getattr(record, name) for name in ("key", "token") if hasattr(record, name)
    }
    msg, args = record.msg, record.args
    if isinstance(msg, str) and isinstance(args, tuple) and args:
        if msg.startswith(_KEY_PREFIX):
            fields.setdefault("key", str(args[0]))
        mark = _TOKEN_MARK.search(msg)
        if mark is not None:
            index = sum(1 for c in _CONVERSION.findall(msg[: mark.end() - 2]) if c != "%%")
            if index < len(args):
                fields.setdefault("token", args[index])
        return fields
    message = record.getMessage()
    if (key := _FORMATTED_KEY.match(message)) is not None:
        fields.setdefault("key", key.group(1))
        if (token := _FORMATTED_TOKEN.search(message, key.end())) is not None:
            fields.setdefault("token", int(token.group(1)))
    return fields


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": record.created,
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
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
        formatter = logging.Formatter(JOURNAL_FORMAT if journal else TEXT_FORMAT)
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
