"""Forking a job's child ahead of its job: the fork server keeps one ready, which waits
on its assignment socket for a job and runs it (sandbox/child.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import traceback
from collections.abc import Mapping
from typing import NoReturn

from sandbox import child, descriptors, raw_signal
from sandbox.confinement import Confinement
from sandbox.loader import LoadedHandler
from sandbox.spares import WarmChild


def fork_job_child(*, server_pid: int, handlers: Mapping[str, LoadedHandler],
                   confinements: Mapping[str, Confinement], devnull: int,
                   confined_for: str | None = None) -> WarmChild:
    """A child that waits for a job; with `confined_for`, it confines itself for that
    handler while it waits, and runs only its jobs."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    # Or the child would inherit, and later write, our buffered output.
    descriptors.flush_stdio()
    # Blocked across fork, so that a SIGTERM sent to a new job waits for its handler.
    raw_signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGTERM,))
    try:
        pid = os.fork()
        if pid == 0:
            _run_job_child(theirs, server_pid, handlers, confinements, devnull, confined_for)
    except OSError:
        ours.close()
        raise
    finally:
        raw_signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGTERM,))
        theirs.close()
    return WarmChild(pid=pid, assignment=ours, confined_for=confined_for)


def _run_job_child(assignment: socket.socket, server_pid: int,
                   handlers: Mapping[str, LoadedHandler],
                   confinements: Mapping[str, Confinement], devnull: int,
                   confined_for: str | None) -> NoReturn:
    """In the child: wait for a job and run it; never returns to the server loop."""
    code = 1
    try:
        kept = [assignment.fileno(), *(settings.sandbox.ruleset_fd
                                        for settings in confinements.values()
                                        if settings.sandbox.ruleset_fd is not None)]
        child.become_job_process(server_pid=server_pid, keep_fds=kept, devnull_fd=devnull)
        code = child.wait_for_job(assignment, handlers, confinements, server_pid,
                                  confined_for=confined_for)
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        descriptors.flush_stdio()
        os._exit(code)
