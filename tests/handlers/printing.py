"""Handlers that print, for `poolsup logs` (tests/integration/test_job_output.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from sandbox import Job


def talks(job: Job) -> dict[str, Any]:
    """Prints `before` lines (and one to stderr), waits until the file `go` exists (or a
    stop comes), then prints `after` lines."""
    for n in range(job.payload.get("before", 3)):
        print(f"before {n}", flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    go = Path(job.payload["go"])
    while not go.exists() and not job.stopping:
        time.sleep(0.05)
    for n in range(job.payload.get("after", 2)):
        print(f"after {n}", flush=True)
    return {"ok": True}


def fails_once(job: Job) -> dict[str, Any]:
    print(f"attempt {job.attempt} says hello", flush=True)
    if job.attempt == 1:
        raise RuntimeError("the first attempt fails")
    return {"ok": True}


def prints_forever(job: Job) -> None:
    """Prints 10 kB lines as fast as it can, until stopped."""
    line = "x" * 9999 + "\n"
    while not job.stopping:
        sys.stdout.write(line)
    sys.stdout.write("stopped printing\n")
    sys.stdout.flush()
