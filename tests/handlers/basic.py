"""Handlers for the fork server tests: one small behaviour each."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

from sandbox import Fail, Job


def echo(job: Job) -> dict[str, Any]:
    return {"key": job.key, "payload": job.payload, "attempt": job.attempt, "token": job.token}


async def async_echo(job: Job) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"key": job.key, "async": True}


def returns_coroutine(job: Job) -> Any:
    return async_echo(job)


def started_at(job: Job) -> float:
    return time.monotonic()


def environment(job: Job) -> dict[str, str | None]:
    names = ("POOLSUP_JOB_KEY", "POOLSUP_JOB_TOKEN", "POOLSUP_JOB_ATTEMPT")
    return {name: os.environ.get(name) for name in names}


def process_ids(job: Job) -> dict[str, int]:
    return {"pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0)}


def raises(job: Job) -> None:
    raise ValueError("boom")


async def async_raises(job: Job) -> None:
    await asyncio.sleep(0)
    raise ValueError("async boom")


def fails(job: Job) -> None:
    raise Fail("bad input")


def exits(job: Job) -> None:
    sys.exit(3)


def unserializable(job: Job) -> object:
    return object()


def prints(job: Job) -> None:
    print("to stdout")
    print("to stderr", file=sys.stderr)


def sleeps(job: Job) -> None:
    time.sleep(job.payload.get("seconds", 60) if isinstance(job.payload, dict) else 60)


def stop_aware(job: Job) -> dict[str, bool]:
    if not job.stopping:  # looking once makes the handler stop-aware
        print("started", flush=True)
    stopped = job.wait_stop(timeout=30)
    return {"stopped": stopped, "stopping": job.stopping}


def stop_unaware(job: Job) -> None:
    print("started", flush=True)
    while True:
        time.sleep(0.01)


async def async_stop_unaware(job: Job) -> None:
    print("started", flush=True)
    await asyncio.sleep(60)


def next_notification(job: Job) -> Any:
    return {"notification": job.next_notification(timeout=30)}


def stopping_at_start(job: Job) -> bool:
    return job.stopping


def stop_reason(job: Job) -> list[str | None]:
    before = job.stop_reason
    job.wait_stop(30)
    return [before, job.stop_reason]


def notifications_until_stop(job: Job) -> list[Any]:
    notifications = []
    while (payload := job.next_notification()) is not None:
        notifications.append(payload)
    return notifications


def escaped_grandchild(job: Job) -> int:
    """Start a daemon: a grandchild in a session of its own, whose parent exits."""
    read_fd, write_fd = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(write_fd, str(os.getpid()).encode())
            os.close(write_fd)
            time.sleep(60)
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        daemon = int(pipe.read())
    # Checked here, while the daemon surely lives (the fork server may kill it as soon as
    # this job has exited): it escaped the job's session and process group.
    if os.getsid(daemon) == os.getsid(0) or os.getpgid(daemon) == os.getpgid(0):
        raise RuntimeError(f"the daemon {daemon} did not escape the job's session")
    return daemon


def escaped_grandchild_then_sleep(job: Job) -> None:
    print(escaped_grandchild(job), flush=True)
    time.sleep(60)
