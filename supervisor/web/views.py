"""Numbers for people: the dashboard's durations, sizes, ages and links.  Pure."""

from __future__ import annotations

import datetime
from typing import Any
from urllib.parse import quote

import orjson

_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def duration(seconds: float | None) -> str:
    """"0.4 s", "45 s", "3 m 12 s", "3 h 5 m", "2 d 4 h": the two largest units."""
    if seconds is None:
        return "-"
    if seconds < 0:
        return "-" + duration(-seconds)
    if seconds < 1:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    parts: list[str] = []
    for name, length in _UNITS:
        if whole >= length or parts:
            parts.append(f"{whole // length} {name}")
            whole %= length
        if len(parts) == 2:
            break
    return " ".join(parts)


def size(value: int | None) -> str:
    if value is None:
        return "-"
    amount = float(value)
    if amount < 1024:
        return f"{amount:.0f} B"
    units = iter(("KiB", "MiB", "GiB"))
    unit = next(units)
    amount /= 1024
    while amount >= 1024 and unit != "GiB":
        amount /= 1024
        unit = next(units)
    return f"{amount:.1f} {unit}"


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return "just now"
    return f"{duration(seconds)} ago"


def when(epoch: float | None) -> str:
    """An epoch time in UTC, to the second."""
    if epoch is None:
        return "-"
    moment = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} %"


def json_text(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def summary(text: str | None, width: int = 120) -> str:
    """An error's last line (a traceback's ends with the exception), shortened."""
    lines = (text or "").strip().splitlines()
    line = lines[-1] if lines else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def job_path(key: str) -> str:
    return "/jobs/" + quote(key, safe="")


FILTERS = {"duration": duration, "size": size, "ago": ago, "when": when, "percent": percent,
           "json_text": json_text, "summary": summary, "job_path": job_path}
