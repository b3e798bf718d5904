"""`poolsup job KEY` in text: a job's history, one line per event, oldest first."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any


def event_lines(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """`events` as `job --json` has them; each line: the UTC time to the millisecond,
    the event, the supervisor and token of the run it concerns, and the detail."""
    lines = []
    for event in events:
        at = datetime.datetime.fromtimestamp(event["at"], datetime.UTC)
        run = event["supervisor"] and f"{event['supervisor']} (token {event['token']})"
        parts = [at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                 f"{event['event']:<10}", run or "", event["detail"] or ""]
        lines.append("  ".join(part for part in parts if part).rstrip())
    return lines
