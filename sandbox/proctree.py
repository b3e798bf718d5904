"""A job's process tree, read from /proc: who is in it, what memory and CPU it uses.

A job's child is a subreaper, so every process it starts stays in its tree while it
lives, even one that called setsid and whose parent exited (a daemon): that process
is re-parented to the job's child rather than to init. The tree is walked through
`/proc/PID/task/TID/children`, which the kernel keeps per thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Fields of /proc/PID/stat, counted from the one after the command name (field 3).
_UTIME, _STIME, _CUTIME, _CSTIME = 11, 12, 13, 14
_RSS = 21


@dataclass(frozen=True, kw_only=True)
class Usage:
    """What a process tree uses right now."""

    rss_bytes: int  # the sum of each process's resident set, as `ps` shows it
    cpu_seconds: float  # user + system, including children the tree has reaped
    processes: int


def children(pid: int) -> list[int]:
    """The children of `pid` (of all its threads); none once it is gone."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as file:
                found.extend(int(child) for child in file.read().split())
        except OSError:
            pass  # a thread that just ended
    return found


def tree(root: int) -> list[int]:
    """`root` and its descendants, parents before their children."""
    pids = [root]
    index = 0
    while index < len(pids):
        pids.extend(children(pids[index]))
        index += 1
    return pids


def usage(root: int) -> Usage:
    rss_pages = 0
    ticks = 0
    pids = tree(root)
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue  # gone since the walk
        fields = stat[stat.rindex(b")") + 2 :].split()
        rss_pages += int(fields[_RSS])
        ticks += sum(int(fields[index]) for index in (_UTIME, _STIME, _CUTIME, _CSTIME))
    return Usage(
        rss_bytes=rss_pages * _PAGE_SIZE, cpu_seconds=ticks / _CLOCK_TICKS, processes=len(pids)
    )


def kill_tree(root: int) -> None:
    """SIGKILL `root`'s process group and every descendant found in /proc.

    A process forked after the walk is not missed: when its parent dies it goes to
    the nearest subreaper (the job's child, or once that is dead the fork server,
    which kills every child that is not a job).
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(root, signal.SIGKILL)
    for pid in reversed(tree(root)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
