"""Handlers for the hardening tests: one small behaviour each (`function = ...`)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from sandbox import Job


def big_result(job: Job) -> str:
    return "x" * int(job.payload["bytes"])


def payload_size(job: Job) -> int:
    return len(job.payload["text"])


def garbage_on_control(job: Job) -> dict[str, bool]:
    """Writes bytes that are not a message on its control socket, then returns."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if fd > 2 and target.startswith("socket:"):
            os.write(fd, b"this is not json\n")
    return {"ok": True}


def chatty(job: Job) -> dict[str, int]:
    """Prints long lines without a pause for `seconds`."""
    end = time.monotonic() + float(job.payload["seconds"])
    lines = 0
    while time.monotonic() < end:
        print("chatter " * 60)
        lines += 1
        if lines % 100 == 0:
            time.sleep(0.001)
    return {"lines": lines}


def notes_once(job: Job) -> list[Any]:
    """First run (no marker file): take one note, record it, then hang (it is drained).
    Later runs: take every note that comes within a second and return them."""
    marker = Path(job.payload["marker"])
    if not marker.exists():
        note = job.next_notification(timeout=30)
        marker.write_text(repr(note))
        while True:
            time.sleep(1)
    taken = []
    while (note := job.next_notification(timeout=1.0)) is not None:
        taken.append(note)
    return taken


def sleeps(job: Job) -> float:
    time.sleep(float(job.payload.get("seconds", 0)))
    return float(job.payload.get("seconds", 0))


def version(job: Job) -> str:
    return "v1"




def notes_on_cue(job: Job) -> list[Any]:
    """First run (no marker file): once the cue file exists, take one note, record it,
    then hang (it is drained).  Later runs: as notes_once."""
    marker, cue = Path(job.payload["marker"]), Path(job.payload["cue"])
    if not marker.exists():
        while not cue.exists():
            time.sleep(0.01)
        note = job.next_notification(timeout=30)
        marker.write_text(repr(note))
        while True:
            time.sleep(1)
    return notes_once(job)


def ignores_notes(job: Job) -> str:
    """Never looks at notes or `job.stopping` (its control socket is never read, and
    fills up with notes); on SIGTERM, the sandbox ends it with `Stopped`, and it writes
    the marker on its way out: a graceful stop, which a SIGKILL would not allow."""
    marker = Path(job.payload["marker"])
    try:
        while True:
            time.sleep(0.05)
    finally:
        marker.write_text("stopped gracefully")
