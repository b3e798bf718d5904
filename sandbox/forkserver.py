"""The fork server: one per supervisor, it forks a fresh child for every job.

Run as `python -m sandbox.forkserver --control-fd FD --handlers JSON`; see
`sandbox.protocol` for the messages. It imports the sandbox and every handler file
once, so a forked child starts its handler without importing anything. It keeps one
child forked ahead, waiting, so that a spawn does not wait for fork either.

It also enforces fences: at a job's deadline (CLOCK_MONOTONIC) it kills the job's
process group itself, so enforcement does not depend on the supervisor's event loop.

The supervisor must start it from its main thread: the parent-death signal fires when
the *thread* that started a process exits, not only the process.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import heapq
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

from sandbox import child, linux, protocol
from sandbox.loader import LoadedHandler, parse_handler_table, preload

_LOOP_TICK = 0.5  # seconds between checks that the parent is still there
_SHUTDOWN_TIMEOUT = 2.0


@dataclass(eq=False, kw_only=True)
class RunningJob:
    job_id: str
    pid: int  # also its process group and session id
    deadline: float | None = None
    fenced: bool = False


@dataclass(eq=False, kw_only=True)
class WarmChild:
    """A child forked ahead of need, waiting on `assignment` to be handed a job."""

    pid: int
    assignment: socket.socket


class SpawnRefused(Exception):
    pass


class ForkServer:
    def __init__(
        self, control: socket.socket, handlers: dict[str, LoadedHandler], parent_pid: int
    ) -> None:
        self._control = control
        self._handlers = handlers
        self._parent_pid = parent_pid
        self._pid = os.getpid()
        self._jobs: dict[str, RunningJob] = {}
        self._jobs_by_pid: dict[int, RunningJob] = {}
        self._fences: list[tuple[float, str]] = []  # a heap; stale entries are skipped
        self._outbox: deque[bytes] = deque()
        self._selector = selectors.DefaultSelector()
        self._devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        self._wakeup_fd = -1
        self._warm: WarmChild | None = None
        self._terminated = False
        self._exiting = False

    def serve(self) -> None:
        self._install_signal_handlers()
        self._control.setblocking(False)
        self._selector.register(self._control, selectors.EVENT_READ)
        self._selector.register(self._wakeup_fd, selectors.EVENT_READ)
        self._fork_ahead()
        errors = {name: handler.error for name, handler in self._handlers.items()}
        self._send({"ev": protocol.EV_READY, "pid": self._pid, "handlers": errors})
        while not self._should_exit():
            for key, mask in self._selector.select(self._select_timeout()):
                self._enforce_fences()  # before a late fence message could extend one
                if key.fd == self._wakeup_fd:
                    _drain(self._wakeup_fd)
                    continue
                if mask & selectors.EVENT_WRITE:
                    self._flush()
                if mask & selectors.EVENT_READ:
                    self._receive()
            self._enforce_fences()
            self._reap()
        self._shutdown()

    def _install_signal_handlers(self) -> None:
        read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._wakeup_fd = read_fd
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # only to wake select
        signal.signal(signal.SIGTERM, self._on_sigterm)
        # A Ctrl-C or hangup meant for the supervisor: it decides what happens to jobs.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def _on_sigterm(self, signum: int, frame: object) -> None:
        self._terminated = True

    def _should_exit(self) -> bool:
        return self._exiting or self._terminated or os.getppid() != self._parent_pid

    def _select_timeout(self) -> float:
        if not self._fences:
            return _LOOP_TICK
        return min(_LOOP_TICK, max(0.0, self._fences[0][0] - time.monotonic()))

    # -- messages from the supervisor

    def _receive(self) -> None:
        while not self._exiting:
            try:
                data, fds, flags, _ = socket.recv_fds(
                    self._control, protocol.MAX_PACKET, 2, socket.MSG_CMSG_CLOEXEC
                )
            except BlockingIOError:
                return
            except ConnectionResetError:
                self._exiting = True  # the supervisor is gone, with our events unread
                return
            except OSError as exc:
                _log(f"control socket failed: {exc}")
                self._exiting = True
                return
            if not data and not fds:
                self._exiting = True  # the supervisor is gone
                return
            try:
                if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                    raise ValueError("message or its file descriptors were truncated")
                self._handle(protocol.decode(data), fds)
            except Exception as exc:
                _close_all(fds)
                _log(f"bad message {data[:200]!r}: {type(exc).__name__}: {exc}")

    def _handle(self, message: dict[str, Any], fds: list[int]) -> None:
        op = message.get("op")
        if op == protocol.OP_SPAWN:
            self._spawn(message, fds)
            return
        _close_all(fds)
        if op == protocol.OP_FENCE:
            deadline = float(message["deadline"])
            for job_id in message["jobs"]:
                self._set_fence(job_id, deadline)
            self._enforce_fences()
        elif op == protocol.OP_SIGNAL:
            self._signal_job(message["job"], int(message["signal"]))
        elif op == protocol.OP_KILL:
            self._signal_job(message["job"], signal.SIGKILL)
        elif op == protocol.OP_EXIT:
            self._exiting = True
        else:
            raise ValueError(f"unknown op {op!r}")

    def _spawn(self, message: dict[str, Any], fds: list[int]) -> None:
        job_id = message["job"]
        name = message["handler"]
        try:
            if not isinstance(job_id, str):
                raise SpawnRefused("job id must be a string")
            if len(fds) != 2:
                raise SpawnRefused(f"spawn needs 2 file descriptors, got {len(fds)}")
            if name not in self._handlers:
                raise SpawnRefused(f"unknown handler {name!r}")
            if job_id in self._jobs:
                raise SpawnRefused(f"job {job_id!r} is already running")
            pid = self._hand_over(name, fds)
        except (SpawnRefused, OSError) as exc:
            self._send({"ev": protocol.EV_SPAWN_FAILED, "job": job_id, "error": str(exc)})
            return
        finally:
            _close_all(fds)
        job = RunningJob(job_id=job_id, pid=pid)
        self._jobs[job_id] = job
        self._jobs_by_pid[pid] = job
        self._send({"ev": protocol.EV_SPAWNED, "job": job_id, "pid": pid})
        self._fork_ahead()

    def _hand_over(self, handler: str, fds: list[int]) -> int:
        """Give the job to the warm child (forking one if there is none); its pid."""
        for _ in range(2):  # a warm child can have died waiting: then fork another
            warm = self._warm or self._fork_warm_child()
            self._warm = None
            try:
                socket.send_fds(warm.assignment, [handler.encode()], fds)
            except OSError:
                continue  # reaped and killed as a leftover
            finally:
                warm.assignment.close()
            return warm.pid
        raise SpawnRefused("no child process took the job")

    def _fork_ahead(self) -> None:
        if self._warm is None:
            try:
                self._warm = self._fork_warm_child()
            except OSError as exc:
                _log(f"cannot fork a child ahead: {exc}")

    def _fork_warm_child(self) -> WarmChild:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        _flush_stdio()  # or the child would inherit, and later write, our buffered output
        # Blocked across fork, so that a SIGTERM sent to a new job waits for its handler.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            pid = os.fork()
            if pid == 0:
                self._run_warm_child(theirs)
        except OSError:
            ours.close()
            raise
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            theirs.close()
        return WarmChild(pid=pid, assignment=ours)

    def _run_warm_child(self, assignment: socket.socket) -> NoReturn:
        """In the child: wait for a job and run it; never returns to the server loop."""
        code = 1
        try:
            child.become_job_process(
                server_pid=self._pid, keep_fd=assignment.fileno(), devnull_fd=self._devnull
            )
            code = child.wait_for_job(assignment, self._handlers)
        except BaseException:
            with contextlib.suppress(BaseException):
                traceback.print_exc()
        finally:
            _flush_stdio()
            os._exit(code)

    def _discard_warm_child(self) -> None:
        if self._warm is not None:
            self._warm.assignment.close()  # end of stream: it exits
            self._warm = None

    def _signal_job(self, job_id: str, signum: int) -> None:
        job = self._jobs.get(job_id)
        if job is not None:
            _signal_job_process(job.pid, signum)

    # -- fences

    def _set_fence(self, job_id: str, deadline: float) -> None:
        job = self._jobs.get(job_id)
        if job is not None:
            job.deadline = deadline
            heapq.heappush(self._fences, (deadline, job_id))

    def _enforce_fences(self) -> None:
        now = time.monotonic()
        while self._fences and self._fences[0][0] <= now:
            _, job_id = heapq.heappop(self._fences)
            job = self._jobs.get(job_id)
            if job is None or job.fenced or job.deadline is None or job.deadline > now:
                continue
            job.fenced = True
            _signal_job_process(job.pid, signal.SIGKILL)

    # -- children

    def _reap(self) -> None:
        reaped = False
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                break
            if info is None:
                break
            job = self._jobs_by_pid.get(info.si_pid)
            if job is not None:
                # While the leader is a zombie its group id cannot be reused: kill the
                # helpers it left in its group before reaping it.
                _signal_job_process(job.pid, signal.SIGKILL)
            _, status = os.waitpid(info.si_pid, 0)
            reaped = True
            if job is not None:
                self._job_exited(job, status)
            elif self._warm is not None and info.si_pid == self._warm.pid:
                self._discard_warm_child()
        if reaped:
            self._kill_leftovers()

    def _job_exited(self, job: RunningJob, status: int) -> None:
        del self._jobs[job.job_id]
        del self._jobs_by_pid[job.pid]
        self._send({
            "ev": protocol.EV_EXITED,
            "job": job.job_id,
            "pid": job.pid,
            "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "fenced": job.fenced,
        })

    def _kill_leftovers(self) -> None:
        """Kill our children that are not jobs.

        Jobs are subreapers, so while a job lives its orphaned descendants are its
        children; a process that comes to us is what a dead job left behind.
        """
        warm_pid = self._warm.pid if self._warm is not None else None
        for pid in linux.child_pids():
            if pid not in self._jobs_by_pid and pid != warm_pid:
                _kill(pid, signal.SIGKILL)

    def _shutdown(self) -> None:
        self._discard_warm_child()
        deadline = time.monotonic() + _SHUTDOWN_TIMEOUT
        while True:
            for job in self._jobs.values():
                _signal_job_process(job.pid, signal.SIGKILL)
            self._kill_leftovers()
            self._reap()
            if not linux.child_pids() or time.monotonic() > deadline:
                break
            time.sleep(0.005)
        self._flush()

    # -- events to the supervisor

    def _send(self, event: dict[str, Any]) -> None:
        self._outbox.append(protocol.encode(event))
        self._flush()

    def _flush(self) -> None:
        """Send what the socket takes now; never block, or fences would wait."""
        while self._outbox:
            try:
                self._control.send(self._outbox[0])
            except BlockingIOError:
                break
            except OSError:
                self._outbox.clear()
                self._exiting = True
                break
            self._outbox.popleft()
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self._outbox else 0)
        if self._control.fileno() in self._selector.get_map():
            self._selector.modify(self._control, events)


def _signal_job_process(pid: int, signum: int) -> None:
    """Signal a job's process group; or, before the child made its group, the child."""
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        # Nothing else can be in its group yet, and its pid, our unreaped child's,
        # cannot have been reused.
        _kill(pid, signum)
    except PermissionError:
        pass


def _kill(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def _close_all(fds: Iterable[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()


def _log(text: str) -> None:
    if sys.stderr is not None:
        try:
            sys.stderr.write(f"poolsup forkserver: {text}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def _ensure_standard_fds() -> None:
    """Give fds 0-2 something, so that received sockets never land on them."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)


def main(argv: list[str] | None = None) -> int:
    parent_pid = os.getppid()
    linux.set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent_pid:
        return 0
    _ensure_standard_fds()
    parser = argparse.ArgumentParser(prog="python -m sandbox.forkserver")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--handlers", required=True, help="JSON: {name: {path, function}}")
    args = parser.parse_args(argv)
    linux.become_child_subreaper()
    control = socket.socket(fileno=args.control_fd)
    handlers = preload(parse_handler_table(args.handlers))
    gc.freeze()  # children then share, rather than copy, the preloaded objects
    ForkServer(control, handlers, parent_pid).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
