"""A logger per job: every line it writes carries the job's key and token as fields of its
record, which the JSON log writes as `key` and `token` and every line shows as
`[KEY] message (token N)` (service/log_format.py), instead of each call site writing them
into its message and the log reading them back."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

ABOUT = "poolsup_job"  # the record attribute that holds the job's `JobRef`


@dataclass(frozen=True, slots=True)
class JobRef:
    key: str
    token: int | None = None

    def line(self, message: str) -> str:
        """`message` as a line about this job: the key first, the token at the end of its
        first line (an error's details may follow on the next lines)."""
        first, newline, rest = message.partition("\n")
        token = "" if self.token is None else f" (token {self.token})"
        return f"[{self.key}] {first}{token}{newline}{rest}"


class JobLog(logging.LoggerAdapter[logging.Logger]):
    """`logger`, for the lines about one job (one run of it: `token`).  Its calls take no
    `extra`: the adapter's own is the job's reference."""

    def __init__(self, logger: logging.Logger, key: str, token: int | None = None) -> None:
        super().__init__(logger, {ABOUT: JobRef(key, token)})

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        """`LoggerAdapter.log`, straight to the logger's record (a line per finished
        job: the adapter's `process` and the logger's `log` asked its level again)."""
        if self.logger.isEnabledFor(level):
            kwargs["extra"] = self.extra
            kwargs.setdefault("stacklevel", 2)  # the caller's line, were it looked up
            self.logger._log(level, msg, args, **kwargs)
