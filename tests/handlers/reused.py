"""Handlers for children that run several jobs one after another
(`max_jobs_per_child`): each reports what it saw of its process, and some leave it
dirty for the next job."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
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


_RLIMITS = {name: getattr(resource, name) for name in dir(resource) if name.startswith("RLIMIT_")}


def process_state() -> dict[str, Any]:
    """What a job inherits of its process besides what `identity` shows: niceness,
    scheduling, CPU affinity, every resource limit, and the signals pending for it."""
    return {
        "pid": os.getpid(),
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "scheduler": os.sched_getscheduler(0),
        "affinity": sorted(os.sched_getaffinity(0)),
        "rlimits": {name: list(resource.getrlimit(number)) for name, number in _RLIMITS.items()},
        "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "pending": sorted(int(s) for s in signal.sigpending()),
    }


def unsettles(job: Job) -> dict[str, Any]:
    """Report the process state this job found, then change it in the ways
    `job.payload` lists, as a job may: a later job must find it as this one did, or
    run in another child."""
    seen = process_state()
    ways = set(job.payload["ways"])
    if "nice_up" in ways:  # lowering it again needs privilege
        os.setpriority(os.PRIO_PROCESS, 0, seen["nice"] + 5)
    if "nice_down" in ways:  # needs privilege
        os.setpriority(os.PRIO_PROCESS, 0, seen["nice"] - 5)
    if "scheduler" in ways:  # leaving SCHED_IDLE needs privilege
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    if "affinity" in ways:
        os.sched_setaffinity(0, {min(seen["affinity"])})
    if "rlimit_soft" in ways:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    if "rlimit_hard" in ways:  # raising it again needs privilege
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
    if "rt_signal" in ways:  # queued twice: real-time signals do not merge
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN, signal.SIGRTMIN + 1})
        for signum in (signal.SIGRTMIN, signal.SIGRTMIN, signal.SIGRTMIN + 1):
            os.kill(os.getpid(), signum)
    return {"seen": seen, "now": process_state()}


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


def leaves_traces(job: Job) -> dict[str, Any]:
    """With `{"secret": ...}`: writes it in its scratch directory, takes one note, gives the
    next a second to arrive and leaves it unread (with `"unread": S`, takes none and
    returns after S seconds).  With `{"earlier": path}`: what it can
    see of an earlier job's scratch directory and notes."""
    seen: dict[str, Any] = {"pid": os.getpid(), "scratch": job.scratch}
    if "secret" in job.payload:
        with open(os.path.join(job.scratch, "secret.txt"), "w") as file:
            file.write(job.payload["secret"])
        if job.payload.get("unread"):  # its notes never leave its control socket
            time.sleep(float(job.payload["unread"]))
            return seen
        seen["note"] = job.next_notification(timeout=20)
        time.sleep(1.0)  # the second note reaches this child, unread
        return seen
    earlier = job.payload["earlier"]
    try:
        with open(os.path.join(earlier, "secret.txt")) as file:
            seen["secret"] = file.read()
    except OSError as error:
        seen["secret"] = None
        seen["error"] = type(error).__name__
    seen["earlier_exists"] = os.path.exists(earlier)
    seen["note"] = job.next_notification(timeout=1.0)
    return seen


def uses_scratch(job: Job) -> dict[str, Any]:
    """What it finds of its scratch directory, read from `POOLSUP_JOB_SCRATCH` without
    changing it; then it leaves the directory as `job.payload["leave"]` says: "file" (one
    left in it), "emptied" (a file made and removed), "mode" (0755), "xattr" (an extended
    attribute), or anything else: as it found it."""
    path = os.environ["POOLSUP_JOB_SCRATCH"]
    info = os.stat(path)
    # Its birth, which tells a directory made again from one kept (an inode's number is
    # given again at once): statx, which os.stat does not read.
    born = subprocess.run(["stat", "--format=%w", path], capture_output=True, text=True,
                          check=True).stdout.strip()
    seen: dict[str, Any] = {
        "pid": os.getpid(), "path": path, "inode": info.st_ino, "born": born,
        "mode": info.st_mode & 0o7777, "entries": os.listdir(path),
        "xattrs": os.listxattr(path),
    }
    leave = job.payload.get("leave")
    if leave in ("file", "emptied"):
        with open(os.path.join(path, "left.txt"), "w") as file:
            file.write(job.key)
        if leave == "emptied":
            os.remove(os.path.join(path, "left.txt"))
    elif leave == "mode":
        os.chmod(path, 0o755)
    elif leave == "xattr":
        try:
            os.setxattr(path, "user.poolsup-test", b"left")
        except OSError as error:  # a file system without user attributes
            seen["xattr_error"] = str(error)
    return seen
