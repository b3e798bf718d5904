"""Orphans: processes that come to the supervisor because their parent died.

When a fork server dies, its children die with it (PR_SET_PDEATHSIG), but what they
started in sessions of their own would go to init and outlive them.  So the supervisor
is a child subreaper (`adopt_orphans`): they come to it instead, and `kill_orphans`
kills them before the dead fork server's children are reported exited.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

import anyio

from sandbox import linux, proctree
from supervisor.forks import procfs

ORPHAN_KILL_TIMEOUT = 2.0
_ORPHAN_POLL = 0.01

# Fork servers started and not yet reaped by their Popen: the only children this
# process has on purpose; any other child is an orphan it adopted.
fork_server_pids: set[int] = set()
_adopting = False


def adopt_orphans() -> None:
    """Make this process a child subreaper (once): orphaned descendants, such as the
    daemons of a dead fork server's jobs, come to it rather than to init."""
    global _adopting
    if not _adopting:
        linux.become_child_subreaper()
        _adopting = True


async def kill_orphans(known: Iterable[int], *, fork_server_pid: int) -> list[int]:
    """SIGKILL the dead fork server's children `known`, and every child of ours that is
    not a fork server with its whole tree; reap them; return once they are gone, or
    after ORPHAN_KILL_TIMEOUT with the pids still alive.

    Polls with short sleeps: the kernel re-parents a process's orphans only as it dies.
    """
    ours = {os.getpid(), fork_server_pid}
    deadline = time.monotonic() + ORPHAN_KILL_TIMEOUT
    while True:
        # Only while still a child of the fork server or of ours: the pid was not reused.
        left = [pid for pid in known if _parent_if_alive(pid) in ours]
        orphans = [pid for pid in linux.child_pids() if pid not in fork_server_pids]
        for pid in left + orphans:
            proctree.kill_tree(pid)
        left += [pid for pid in orphans if not _reaped(pid)]
        if not left or time.monotonic() > deadline:
            return sorted(set(left))
        await anyio.sleep(_ORPHAN_POLL)


def _parent_if_alive(pid: int) -> int | None:
    """The parent of `pid`, or None if it is gone or a zombie."""
    fields = procfs.stat_fields(pid)
    if fields is None or fields[0] in (b"Z", b"X"):
        return None
    return int(fields[1])


def _reaped(pid: int) -> bool:
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return reaped == pid
