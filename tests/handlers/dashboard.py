"""Handlers for the dashboard tests: a job that runs until stopped, one that fails with
the error its payload names."""

from __future__ import annotations

import time
from typing import Any

from sandbox import Fail, Job


def until_stopped(job: Job) -> dict[str, Any]:
    print(f"working on {job.key} <b>not bold</b>", flush=True)
    stopped = job.wait_stop(timeout=600)
    time.sleep(1.0)  # a slow stop: the page shows it stopping before it is stopped
    return {"stopped": stopped}


def fails_with(job: Job) -> None:
    raise Fail(str(job.payload.get("message", "failed")))
