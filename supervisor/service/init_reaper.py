"""The supervisor as a container's PID 1: the kernel hands it every orphan of the
container (a process whose parent died: what a `kubectl exec` left behind, a daemon a
handler's tool started outside the job's reach), and only PID 1 can reap them; a PID 1
that does not leaves zombies until the container ends (no tiny init is then needed).

Every REAP_EVERY seconds, each child that is a zombie and is not a fork server (whose
`Popen` reaps it) is reaped. Live children are left alone: a job's leftovers are the fork
server's and `forks.orphans`' business.
"""

from __future__ import annotations

import os

import anyio

from sandbox import linux
from supervisor.forks import orphans, procfs

REAP_EVERY = 1.0


def is_init() -> bool:
    return os.getpid() == 1


def reap_zombies() -> list[int]:
    """Reap the children that are zombies, fork servers aside; their pids."""
    reaped = []
    for pid in linux.child_pids():
        if pid in orphans.fork_server_pids:
            continue
        fields = procfs.stat_fields(pid)
        if fields is None or fields[0] != b"Z":
            continue
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        if done == pid:
            reaped.append(pid)
    return reaped


async def reap_orphans() -> None:
    """Forever, as PID 1."""
    while True:
        reap_zombies()
        await anyio.sleep(REAP_EVERY)
