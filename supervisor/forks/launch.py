"""Starting a fork server: its command, its environment without our secrets, and the
table of handlers it preloads."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import orjson

from supervisor.config import HandlerConfig
from supervisor.forks import orphans
from supervisor.forks.fork_client import ForkServerClient, ForkServerDied, Referee
from supervisor.forks.idle_children import IDLE_LIMIT, IDLE_LIMIT_VARIABLE

# What the fork server keeps of our environment when no handler inherits it all: what
# the interpreter needs to start and find its packages, and the locale.
_FORK_SERVER_VARIABLES = frozenset({"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "VIRTUAL_ENV"})
_FORK_SERVER_PREFIXES = ("LC_", "PYTHON")
# The service manager's messages to this process (sd_notify, the watchdog, socket
# activation): never for a job, even one that inherits the whole environment.
_SERVICE_MANAGER_VARIABLES = frozenset({
    "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES",
})


def handler_table(handlers: Mapping[str, HandlerConfig]) -> dict[str, dict[str, Any]]:
    """What the fork server needs of each handler (see `sandbox.protocol`)."""
    return {
        name: {
            "path": str(handler.path),
            "function": handler.function,
            "memory_limit": handler.memory_limit,
            "cpu_limit": handler.cpu_limit,
            "nice": handler.nice,
            "cwd": None if handler.cwd is None else str(handler.cwd),
            "env": handler.env,
            "inherit_env": handler.inherit_env,
            "user": handler.user,
            "group": handler.group,
            "max_jobs_per_child": handler.max_jobs_per_child,
            "child_concurrency": handler.child_concurrency,
            "sandbox": {
                "profile": handler.sandbox.profile,
                "writable": [str(path) for path in handler.sandbox.writable],
                "hidden": [str(path) for path in (*handler.protected, *handler.sandbox.hidden)],
                "network": handler.sandbox.network,
            },
        }
        for name, handler in handlers.items()
    }


def fork_server_environment(
    handlers: Mapping[str, HandlerConfig], environ: Mapping[str, str]
) -> dict[str, str]:
    """The fork server's environment: without our own (which may hold store
    credentials), unless a handler asks to inherit it; never with the service
    manager's variables.

    The fork server builds each job's environment from this one; keeping the rest out
    of it, rather than only out of the jobs, keeps it out of their memory too.
    """
    if any(handler.inherit_env for handler in handlers.values()):
        return {name: value for name, value in environ.items()
                if name not in _SERVICE_MANAGER_VARIABLES}
    return {
        name: value
        for name, value in environ.items()
        if name in _FORK_SERVER_VARIABLES or name.startswith(_FORK_SERVER_PREFIXES)
    }


def _handler_table_file(handlers: Mapping[str, HandlerConfig]) -> int:
    """An anonymous file holding the handler table, read from the start."""
    fd = os.memfd_create("poolsup-handlers", 0)
    os.write(fd, orjson.dumps(handler_table(handlers)))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@asynccontextmanager
async def open_fork_server(
    handlers: Mapping[str, HandlerConfig], *, referee: Referee | None = None,
    tracing: bool = False,
) -> AsyncIterator[ForkServerClient]:
    """Start a fork server preloaded with `handlers` (and, with `tracing`, with what its
    children need to keep their jobs' spans: sandbox/tracing.py); kill it and its
    children on exit."""
    orphans.adopt_orphans()
    idle_limit = float(os.environ.get(IDLE_LIMIT_VARIABLE, IDLE_LIMIT))
    parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    table_fd = _handler_table_file(handlers)
    command = [
        sys.executable,
        "-m",
        "sandbox.forkserver",
        "--control-fd",
        str(child_sock.fileno()),
        "--handlers-fd",
        str(table_fd),
        "--idle-limit",
        str(idle_limit),
        *(["--tracing"] if tracing else []),
    ]
    # Started from the loop's own thread: PR_SET_PDEATHSIG in the fork server fires
    # when the thread that forked it exits, and this one lives as long as we do.
    # In a session of its own: a Ctrl-Z or `kill -STOP -PGID` that freezes us must not
    # freeze the fences; it still dies with us (PR_SET_PDEATHSIG, getppid).
    try:
        process = subprocess.Popen(  # noqa: ASYNC220 - a fork+exec, over in milliseconds
            command,
            pass_fds=[child_sock.fileno(), table_fd],
            stdin=subprocess.DEVNULL,
            env=fork_server_environment(handlers, os.environ),
            start_new_session=True,
        )
        orphans.fork_server_pids.add(process.pid)
    finally:
        os.close(table_fd)
        child_sock.close()
    parent_sock.setblocking(False)
    server = ForkServerClient(process, parent_sock, referee, idle_limit,
                              {name: handler.max_jobs_per_child
                               for name, handler in handlers.items()})
    async with anyio.create_task_group() as group:
        await group.start(server.serve)
        try:
            with anyio.fail_after(30):
                await server.wait_ready()
            if not server.alive:
                raise ForkServerDied("fork server failed to start")
            yield server
        finally:
            with anyio.CancelScope(shield=True):
                await server.close()
            group.cancel_scope.cancel()
