"""Handlers that snooze (`sandbox.Snooze`): the first run saves when and where it snoozed
in its checkpoint, the next returns what it saw."""

from __future__ import annotations

import os
import time
from typing import Any

from sandbox import Job, Snooze


def snoozes_once(job: Job) -> Any:
    """Snoozes `seconds` the first time; then returns its attempt, when the first run
    snoozed, when this one started, and the pids of both."""
    if job.checkpoint is None:
        job.save_checkpoint({"snoozed_at": time.time(), "snoozed_pid": os.getpid()})
        raise Snooze(job.payload["seconds"])
    return {"attempt": job.attempt, "started": time.time(), "pid": os.getpid(),
            **job.checkpoint}


async def snoozes_once_async(job: Job) -> Any:
    return snoozes_once(job)


def snoozes_badly(job: Job) -> Any:
    raise Snooze(job.payload["seconds"])
