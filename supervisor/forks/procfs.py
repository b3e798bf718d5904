"""Cheap per-process figures straight from /proc: one read per process.

psutil costs several file reads and objects per call; at a thousand children sampled
every renewal that was most of an idle supervisor's CPU.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcessSample:
    rss_bytes: int
    cpu_seconds: float
    taken_at: float


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after "(comm)" (field 3 on), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            data = stat_file.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2 :].split()


def sample(pid: int) -> ProcessSample | None:
    """RSS and CPU time of one process, or None if it is gone."""
    fields = stat_fields(pid)
    if fields is None:
        return None
    # Fields after "(comm)" start at field 3: utime is field 14, stime 15, rss 24.
    cpu_ticks = int(fields[11]) + int(fields[12])
    return ProcessSample(
        rss_bytes=int(fields[21]) * PAGE_SIZE,
        cpu_seconds=cpu_ticks / CLOCK_TICKS,
        taken_at=time.monotonic(),
    )


def cpu_percent(earlier: ProcessSample, later: ProcessSample) -> float:
    elapsed = later.taken_at - earlier.taken_at
    if elapsed <= 0:
        return 0.0
    return round(100.0 * (later.cpu_seconds - earlier.cpu_seconds) / elapsed, 1)
