"""Handlers whose attempts end in each documented way."""

import os
import time

from sandbox import Fail


def flaky(job):
    """Fails until attempt `succeed_on`, then returns the attempt number."""
    if job.attempt < job.payload["succeed_on"]:
        raise RuntimeError(f"flaky failure on attempt {job.attempt}")
    return {"attempt": job.attempt, "started": time.time()}


def always_fails(job):
    raise ValueError("always fails")


def fails_for_good(job):
    raise Fail("bad input, do not retry")


def sleeps(job):
    time.sleep(float(job.payload.get("seconds", 60)))
    return "woke up"


def unserializable(job):
    return object()


def environment(job):
    return {
        "key": os.environ.get("POOLSUP_JOB_KEY"),
        "token": os.environ.get("POOLSUP_JOB_TOKEN"),
        "attempt": os.environ.get("POOLSUP_JOB_ATTEMPT"),
        "payload": job.payload,
    }


async def async_echo(job):
    return {"echo": job.payload}


def waits_for_stop(job):
    """Stop-aware: returns cleanly once a stop is asked for."""
    if job.wait_stop(60):
        marker = job.payload.get("marker")
        if marker:
            with open(marker, "w") as out:
                out.write("stopped cleanly")
        return "stopped"
    return "not stopped"


def listens(job):
    """Returns the first notification it receives."""
    return {"note": job.next_notification(timeout=30)}


def crashes(job):
    os._exit(7)


def fails_until_file(job):
    """Fails for good until the file named in the payload exists, then returns it."""
    path = job.payload["path"]
    if not os.path.exists(path):
        raise Fail(f"no file {path}")
    return {"found": path, "attempt": job.attempt}
