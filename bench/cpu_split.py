"""The CPU per job of each part of a system (supervisor, fork server, job processes,
redis-server, ...), from /proc through psutil, for the throughput phases of peers.py.

A `Part` names processes whose *own* user+system time counts, and processes whose time
*below* counts: their reaped descendants (children_user + children_system, which the
kernel adds to a parent when it waits for a child, the child's own reaped children
included) plus the own and reaped times of every descendant still in /proc (running, or
exited and not yet waited for). A process counts its own time while it is in /proc; once
reaped, its time is only in its parent's children_* fields, so nothing counts twice.

A process started during the phase counts from zero: everything since its launch,
startup included. Take `snapshot` of what existed before (redis-server) just before
launching, and the end `snapshot` before anything is stopped or reaped: a process that
has exited but not been waited for (a zombie) still shows its times (`wait_exited`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import psutil
import redis


@dataclass(frozen=True)
class Part:
    own: tuple[psutil.Process, ...] = ()
    below: tuple[psutil.Process, ...] = ()


def redis_process(url: str) -> psutil.Process:
    """The redis-server process behind `url` (its INFO gives the pid)."""
    client = redis.Redis.from_url(url)
    try:
        return psutil.Process(int(client.info("server")["process_id"]))
    finally:
        client.close()


def exited(pid: int) -> bool:
    """Whether our child `pid` has exited, without reaping it (its times stay readable)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def wait_exited(pids: Iterable[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for pid in pids:
        while not exited(pid):
            if time.monotonic() > deadline:
                raise TimeoutError(f"process {pid} still running after {timeout} s")
            time.sleep(0.01)


def _own(process: psutil.Process) -> float:
    times = process.cpu_times()  # a part's own process must still be there: raises if not
    return times.user + times.system


def _reaped(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.children_user + times.children_system


def _below(process: psutil.Process) -> float:
    """Reaped descendants plus live (or zombie) descendants, each counted once."""
    for _ in range(10):
        descendants = process.children(recursive=True)
        live = 0.0
        for descendant in descendants:
            try:
                times = descendant.cpu_times()  # own and reaped from one /proc read
            except psutil.NoSuchProcess:
                continue  # reaped meanwhile: its time is in its parent's children_*
            live += times.user + times.system + times.children_user + times.children_system
        reaped = _reaped(process)
        # One reaped between the two reads would count twice (alive, then in children_*).
        if all(descendant.is_running() for descendant in descendants):
            break
    return live + reaped


def snapshot(parts: Mapping[str, Part]) -> dict[str, float]:
    """CPU seconds (user + system) of each part, now."""
    return {name: sum(_own(p) for p in part.own) + sum(_below(p) for p in part.below)
            for name, part in parts.items()}


def per_job_ms(before: Mapping[str, float], after: Mapping[str, float],
               jobs: int) -> dict[str, float]:
    """Milliseconds of CPU per job of each part of `after`, and their `total`; a part
    missing from `before` started during the phase, from zero."""
    split = {name: (seconds - before.get(name, 0.0)) * 1000 / jobs
             for name, seconds in after.items()}
    split["total"] = sum(split.values())
    return split
