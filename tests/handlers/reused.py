"""Handlers for children that run several jobs one after another
(`max_jobs_per_child`): each reports what it saw of its process, and some leave it
dirty for the next job."""

from __future__ import annotations

import os
import resource
import signal
import sys
import threading
import time
from typing import Any

from sandbox import Job


def identity(job: Job) -> dict[str, Any]:
    """What this job sees of its process: a dirty earlier job must not show here."""
    return {
        "pid": os.getpid(),
        "key": os.environ.get("POOLSUP_JOB_KEY"),
        "token": os.environ.get("POOLSUP_JOB_TOKEN"),
        "attempt": os.environ.get("POOLSUP_JOB_ATTEMPT"),
        "home": os.environ.get("HOME"),
        "leaked": os.environ.get("REUSED_LEAKED"),
        "cwd": os.getcwd(),
        "threads": threading.active_count(),
        "children": _children(),
        "sigusr1": str(signal.getsignal(signal.SIGUSR1)),
        "stdin": os.readlink("/proc/self/fd/0"),
        "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "pending": sorted(int(s) for s in signal.sigpending()),
        "umask": _umask(),
        "payload": job.payload,
    }


def raises(job: Job) -> None:
    _note_pid(job)
    raise ValueError(f"job {job.key} gave up")


def dirty(job: Job) -> dict[str, Any]:
    """Report what this job sees, then leave the process dirty in the ways
    `job.payload` lists; return both, with the pids of the processes left behind."""
    seen = identity(job)
    print(f"started {job.key}", flush=True)
    ways = set(job.payload["ways"])
    left: list[int] = []
    if "environ" in ways:
        os.environ["HOME"] = "/changed-by-a-job"
        os.environ["REUSED_LEAKED"] = "yes"
    if "cwd" in ways:
        os.chdir("/")
    if "signal" in ways:
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
        os.kill(os.getpid(), signal.SIGUSR2)  # pending, and deadly once unblocked
        os.umask(0o077)
    if "grandchild" in ways:
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        left.append(pid)
    if "daemon" in ways:
        left.append(_daemon())
    if "stdio" in ways:
        sys.stdout.close()
        for fd in (0, 1, 2):
            os.close(fd)
    if "thread" in ways:
        threading.Thread(target=time.sleep, args=(60,), name="leaked").start()
    return {"seen": seen, "left": left}


def _daemon() -> int:
    """A grandchild in a session of its own whose parent exited."""
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
        return int(pipe.read())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _children() -> list[int]:
    found: list[int] = []
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{task}/children") as file:
            found.extend(int(pid) for pid in file.read().split())
    return found


def burn(job: Job) -> dict[str, Any]:
    """Use `job.payload["seconds"]` of CPU time, counted from this job's start."""
    def used() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    start = used()
    while used() - start < float(job.payload["seconds"]):
        pass
    return {"pid": os.getpid(), "cpu": used()}


def _note_pid(job: Job) -> None:
    if isinstance(job.payload, dict) and "pids" in job.payload:
        with open(job.payload["pids"], "a") as file:
            file.write(f"{os.getpid()}\n")


def sleeps(job: Job) -> dict[str, Any]:
    """Note its pid in `job.payload["pids"]` (if given), then sleep."""
    _note_pid(job)
    time.sleep(float(job.payload.get("seconds", 60)))
    return {"pid": os.getpid()}


def waits_for_stop(job: Job) -> dict[str, Any]:
    """Stop-aware: return once asked to stop (or after `job.payload["seconds"]`)."""
    job.wait_stop(float(job.payload.get("seconds", 60)))
    return {"pid": os.getpid()}


def allocates(job: Job) -> dict[str, Any]:
    """Hold `job.payload["mib"]` MiB, touched, then return."""
    _note_pid(job)
    held = b"\x01" * (int(job.payload["mib"]) << 20)
    time.sleep(float(job.payload.get("seconds", 0)))
    return {"pid": os.getpid(), "held": len(held) >> 20}


_HOARD: list[bytes] = []


def hoards(job: Job) -> dict[str, Any]:
    """Keep `job.payload["mib"]` MiB after it returns, as a leaking cache would."""
    _HOARD.append(b"\x01" * (int(job.payload["mib"]) << 20))
    return {"pid": os.getpid()}
