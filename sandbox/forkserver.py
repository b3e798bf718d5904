"""The fork server: one per supervisor, it forks a fresh child for every job. For a
handler with max_jobs_per_child > 1, the supervisor starts the next job of a child that
ran one on that child's own channel (`sandbox.reuse`); it tells the fork server first
(`assign`), which fences and watches that job as it does a fresh child's.

Run as `python -m sandbox.forkserver --control-fd FD --handlers-fd FD` (or
`--handlers JSON`); see `sandbox.protocol` for the messages. It imports the sandbox and
every handler file once, so a forked child starts its handler without importing
anything. It keeps children forked ahead, waiting, so that a spawn does not wait for
fork either; it forks them a few at a time, which costs it less (`WarmChildren`).

It also enforces what must not depend on the supervisor's event loop: fences (at a
job's deadline, on `protocol.fence_clock`, it kills the job) and each handler's memory
and CPU limits (`sandbox.limits`), and it kills whatever a job leaves behind
(`sandbox.jobs`). One clock, the fence clock, times everything in its loop.

The supervisor must start it from its main thread: the parent-death signal fires when
the *thread* that started a process exits, not only the process.
"""

from __future__ import annotations

import argparse
import gc
import os
import selectors
import signal
import socket
import sys
import time
from collections import deque

from sandbox import (
    child,
    confinement,
    descriptors,
    linux,
    proctree,
    protocol,
    step_marks,
    tracing,
)
from sandbox.confinement import Confinement
from sandbox.held_starts import HeldStarts
from sandbox.jobs import Jobs
from sandbox.loader import LoadedHandler, parse_handler_table, preload
from sandbox.scratch import ScratchRoot
from sandbox.shared_children import SharedChild, SharedChildren
from sandbox.spares import IdleChild, IdleChildren, WarmChild, WarmChildren
from sandbox.stacks import STACKS_SIGNAL
from sandbox.warm_fork import fork_job_child

_LOOP_TICK = 0.5  # seconds between checks that the parent is still there
_SHUTDOWN_TIMEOUT = 2.0
FORKED_AHEAD = 4  # children forked in a row to wait for jobs (`WarmChildren`)
HANDLERS_FORKED_FOR = 3  # handlers whose children forked ahead are kept confined and waiting
SHARED_IDLE_LIMIT = 60.0  # seconds a shared child without a job waits before it is killed


class SpawnRefused(Exception):
    pass


class ForkServer:
    def __init__(
        self,
        control: socket.socket,
        handlers: dict[str, LoadedHandler],
        confinements: dict[str, Confinement],
        parent_pid: int,
        scratch: ScratchRoot | None = None,
        sandbox_notes: dict[str, str] | None = None,
        idle_limit: float = SHARED_IDLE_LIMIT,
    ) -> None:
        self._control = control
        self._scratch = scratch
        self._sandbox_notes = sandbox_notes or {}
        self._handlers = handlers
        self._confinements = confinements
        self._parent_pid = parent_pid
        self._pid = os.getpid()
        step_marks.make()  # before the first fork: every child shares it
        self._slots = step_marks.Slots()
        self._jobs = Jobs(stepping=self._stepping_in)
        self._outbox: deque[bytes] = deque()
        self._selector = selectors.DefaultSelector()
        self._devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        self._wakeup_fd = -1
        self._warm = WarmChildren(FORKED_AHEAD, kept_handlers=HANDLERS_FORKED_FOR)
        self._starts = HeldStarts()
        self._idle = IdleChildren()
        self._shared = SharedChildren(idle_limit)
        self._terminated = False
        self._exiting = False

    def serve(self) -> None:
        self._install_signal_handlers()
        self._control.setblocking(False)
        self._selector.register(self._control, selectors.EVENT_READ)
        self._selector.register(self._wakeup_fd, selectors.EVENT_READ)
        self._fork_ahead(next(iter(self._handlers)) if len(self._handlers) == 1 else None)
        errors = {
            name: handler.error or self._confinements[name].error
            for name, handler in self._handlers.items()
        }
        self._send(protocol.Ready(pid=self._pid, handlers=errors, sandbox=self._sandbox_notes))
        while not self._should_exit():
            for key, mask in self._selector.select(self._select_timeout()):
                # Before a late fence message could extend one.
                self._jobs.enforce_fences(protocol.fence_clock())
                if key.fd == self._wakeup_fd:
                    descriptors.drain(self._wakeup_fd)
                    continue
                if isinstance(key.data, SharedChild):
                    self._read_reports(key.data)
                    continue
                if mask & selectors.EVENT_WRITE:
                    self._flush()
                if mask & selectors.EVENT_READ:
                    self._receive()
            now = protocol.fence_clock()
            self._jobs.enforce_fences(now)
            self._jobs.enforce_limits(now)
            for idle in self._shared.idle_too_long(now):
                idle.idle_since = None
                proctree.kill_tree(idle.pid)
            self._reap()
            for report in self._starts.due(now):
                self._send(report)
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
        # Inherited by each job's child until its reporter is in place (sandbox/stacks.py).
        signal.signal(STACKS_SIGNAL, signal.SIG_IGN)

    def _on_sigterm(self, signum: int, frame: object) -> None:
        self._terminated = True

    def _should_exit(self) -> bool:
        return self._exiting or self._terminated or os.getppid() != self._parent_pid

    def _select_timeout(self) -> float:
        dues = [due for due in (self._jobs.next_due(), self._starts.next_due(),
                                self._shared.next_due())
                if due is not None]
        if not dues:
            return _LOOP_TICK
        return min(_LOOP_TICK, max(0.0, min(dues) - protocol.fence_clock()))

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
                *notices, last = protocol.decode_requests(data)
                for notice in notices:
                    self._handle(notice, [])
                self._handle(last, fds)  # descriptors go with the packet's last request
            except Exception as exc:
                descriptors.close_all(fds)
                _log(f"bad message {data[:200]!r}: {type(exc).__name__}: {exc}")

    def _handle(self, message: protocol.Request, fds: list[int]) -> None:
        if isinstance(message, protocol.Spawn):
            self._spawn(message, fds)
            return
        descriptors.close_all(fds)
        match message:
            case protocol.Finished(jobs=jobs):
                for job_id in jobs:
                    self._finished(job_id)
            case protocol.Assign():
                self._assign(message)
            case protocol.Fence(jobs=jobs, deadline=deadline):
                for job_id in jobs:
                    self._jobs.set_fence(job_id, float(deadline))
                self._jobs.enforce_fences(protocol.fence_clock())
            case protocol.Signal(job=job_id, signal=signum):
                self._jobs.signal(job_id, int(signum))
            case protocol.Kill(job=job_id):
                self._jobs.kill(job_id)
            case protocol.AskStacks(job=job_id):
                self._jobs.ask_stacks(job_id)
            case protocol.Exit():
                self._exiting = True
            case protocol.Ping(seq=seq):
                self._send(protocol.Pong(seq=seq))

    def _spawn(self, message: protocol.Spawn, fds: list[int]) -> None:
        job_id = message.job
        name = message.handler
        deadline = message.deadline
        try:
            if not isinstance(job_id, str):
                raise SpawnRefused("job id must be a string")
            if len(fds) != 2:
                raise SpawnRefused(f"spawn needs 2 file descriptors, got {len(fds)}")
            if name not in self._handlers:
                raise SpawnRefused(f"unknown handler {name!r}")
            # Its supervisor was held up (frozen) between the claim and the spawn: the
            # store may have given the job to another supervisor already.
            if deadline is not None and float(deadline) <= protocol.fence_clock():
                raise SpawnRefused("its lease ran out before the spawn: not started")
            if job_id in self._jobs:
                raise SpawnRefused(f"job {job_id!r} is already running")
            scratch = self._make_scratch(job_id, name)
            if (shared := self._with_room(name)) is not None:
                try:
                    socket.send_fds(shared.assignment,
                                    [protocol.assignment(name, scratch, job_id)], fds)
                except OSError:
                    pass  # it is dying: the job goes to a child of its own
                else:
                    self._joined(shared, job_id, name, deadline)
                    return
            slot = self._slots.take() if self._shared_job(name) else -1
            try:
                taker = self._hand_over(name, scratch, fds, job_id, slot)
            except BaseException:
                self._slots.give_back(slot)
                self._remove_scratch(job_id)
                raise
        except (SpawnRefused, OSError) as exc:
            self._send(protocol.SpawnFailed(job=job_id, error=str(exc)))
            return
        finally:
            descriptors.close_all(fds)
        # A child's channels are the supervisor's from now on: a reused child says
        # "done" there, and its next job starts there (`_finished`, `_assign`). A shared
        # child's assignment socket stays: its next jobs come there, its reports too.
        if self._shared_job(name):
            shared = SharedChild(pid=taker.pid, handler=name, assignment=taker.assignment,
                                 slot=slot)
            self._shared.add(shared)
            taker.assignment.setblocking(False)
            self._selector.register(taker.assignment, selectors.EVENT_READ, shared)
        else:
            taker.assignment.close()
        self._jobs.add(job_id, taker.pid, self._handlers[name].spec, protocol.fence_clock(),
                       handler=name)
        if deadline is not None:
            self._jobs.set_fence(job_id, float(deadline))
        report = protocol.Spawned(job=job_id, pid=taker.pid)
        if self._handlers[name].spec.max_jobs_per_child == 1 and not self._shared_job(name):
            self._starts.hold(report, protocol.fence_clock())  # sent with a short job's exit
        else:  # the supervisor waits for it to reuse the child
            self._send(report)
        self._fork_ahead(name)

    def _stepping_in(self, pid: int) -> str | None:
        shared = self._shared.get(pid)
        return None if shared is None else step_marks.read(shared.slot)

    def _shared_job(self, handler: str) -> bool:
        return self._handlers[handler].spec.child_concurrency > 1

    def _with_room(self, handler: str) -> SharedChild | None:
        concurrency = self._handlers[handler].spec.child_concurrency
        if concurrency == 1:
            return None
        return self._shared.with_room(handler, concurrency, self._jobs.jobs_in,
                                      self._jobs.ending_child)

    def _joined(self, shared: SharedChild, job_id: str, handler: str,
                deadline: float | None) -> None:
        """`job_id` was handed to the shared child `shared`: fenced from now on, on its
        own."""
        shared.idle_since = None
        self._jobs.add(job_id, shared.pid, self._handlers[handler].spec, protocol.fence_clock(),
                       handler=handler)
        if deadline is not None:
            self._jobs.set_fence(job_id, float(deadline))
        self._send(protocol.Spawned(job=job_id, pid=shared.pid))

    def _read_reports(self, shared: SharedChild) -> None:
        """What a shared child says: a job's end (reported now, its scratch directory
        removed), or the job that took it over its memory limit (killed for it)."""
        while True:
            try:
                data = shared.assignment.recv(protocol.MAX_PACKET)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:  # it is dying: its reap reports what it held
                self._selector.unregister(shared.assignment)
                return
            try:
                report = protocol.decode_report(data)
            except ValueError as exc:
                _log(f"bad report from shared child {shared.pid}: {exc}")
                continue
            if isinstance(report, protocol.OverLimit):
                self._jobs.over_limit(report.job)
                continue
            job = self._jobs.get(report.job)
            if job is None or job.pid != shared.pid:
                continue  # not one of its jobs: never trusted to end another's
            if (event := self._jobs.ended(report.job, int(report.code))) is not None:
                self._send(event)
            if self._jobs.jobs_in(shared.pid) == 0:
                shared.idle_since = protocol.fence_clock()

    def _finished(self, job_id: str) -> None:
        """The supervisor read "done" from the job's reused child: the job is over and
        the child waits, clean, for its next job. Not for a job this process is ending
        (a fence, a limit, a stop): its reap reports it, and its child is not idle."""
        job = self._jobs.get(job_id)
        if job is None or job.signalled or self._jobs.finish(job_id) is None:
            return
        spec = self._handlers[job.handler].spec
        # Taken while the child waits: the next job's CPU is counted from here.
        cpu_base = proctree.usage(job.pid).cpu_seconds if spec.cpu_limit else 0.0
        self._idle.put(IdleChild(pid=job.pid, handler=job.handler, scratch=job_id,
                                 cpu_base=cpu_base))

    def _assign(self, message: protocol.Assign) -> None:
        """The supervisor starts `message.job` in an idle reused child, on the child's
        own channel, right after this message: from here the job is fenced, its limits
        watched, as a fresh child's. Its deadline may have passed already (a supervisor
        held up after its check): the fence kills the child at once, before anything
        else of this loop. A child no longer idle (it died, or a fence or a limit ended
        its last job) has not run the job: `spawn_failed`."""
        job_id = message.job
        idle = self._idle.take(message.pid) if job_id not in self._jobs else None
        if idle is None:
            self._send(protocol.SpawnFailed(job=job_id, error="its child no longer waits"))
            return
        self._jobs.add(job_id, idle.pid, self._handlers[idle.handler].spec,
                       protocol.fence_clock(), handler=idle.handler, cpu_base=idle.cpu_base)
        if self._scratch is not None:
            self._scratch.rename(idle.scratch, job_id)
        self._jobs.set_fence(job_id, float(message.deadline))
        self._jobs.enforce_fences(protocol.fence_clock())

    def _make_scratch(self, job_id: str, handler: str) -> str:
        identity = self._confinements[handler].identity
        owner = None if identity is None else (identity.uid, identity.gid)
        return self._scratch.make(job_id, owner) if self._scratch is not None else ""

    def _remove_scratch(self, job_id: str) -> None:
        if self._scratch is not None and (problem := self._scratch.remove(job_id)):
            _log(problem)

    def _hand_over(self, handler: str, scratch: str, fds: list[int], job_id: str,
                   slot: int) -> WarmChild:
        """Give the job to the oldest warm child (forking one if there is none): that
        child. Its assignment socket is left open."""
        # Warm children can have died waiting: then the next, and at worst a new one.
        for _ in range(self._warm.batch + 1):
            warm = self._warm.take(handler) or self._fork_child(None)
            try:
                socket.send_fds(warm.assignment,
                                [protocol.assignment(handler, scratch, job_id, slot)], fds)
            except OSError:
                warm.assignment.close()
                continue  # reaped and killed as a leftover
            return warm
        raise SpawnRefused("no child process took the job")

    def _fork_ahead(self, handler: str | None) -> None:
        """Children for the next jobs of `handler` (the last spawn's; None before the
        first), if none waits for one: confined for it as they wait, unless its
        children run several jobs (they confine once they know their first; their
        later jobs need no fork)."""
        if handler is not None and (self._handlers[handler].spec.max_jobs_per_child > 1
                                    or self._shared_job(handler)):
            handler = None
        if self._warm.ready_for(handler):
            return
        self._warm.keep_latest(handler)
        for _ in range(self._warm.batch):
            try:
                self._warm.add(self._fork_child(handler))
            except OSError as exc:
                _log(f"cannot fork a child ahead: {exc}")
                return

    def _fork_child(self, confined_for: str | None) -> WarmChild:
        return fork_job_child(server_pid=self._pid, handlers=self._handlers,
                              confinements=self._confinements, devnull=self._devnull,
                              confined_for=confined_for)

    # -- children

    def _spare_pids(self) -> set[int]:
        spares = self._idle.pids()
        spares |= self._warm.pids()
        spares |= self._shared.pids()
        return spares

    def _reap(self) -> None:
        events, dead = self._jobs.reap(self._spare_pids(), protocol.fence_clock())
        self._warm.forget(dead)
        for idle in self._idle.forget(dead):
            self._remove_scratch(idle.scratch)
        for shared in self._shared.forget(dead):
            self._slots.give_back(shared.slot)
            if shared.assignment.fileno() in self._selector.get_map():
                self._selector.unregister(shared.assignment)
            shared.assignment.close()
        for event in events:
            self._send(event)

    def _shutdown(self) -> None:
        for report in self._starts.take_all():
            self._send(report)
        self._warm.close()
        self._shared.close()
        for pid in self._idle.pids():
            proctree.kill_tree(pid)
        deadline = time.monotonic() + _SHUTDOWN_TIMEOUT
        while True:
            self._jobs.kill_all()
            self._reap()
            if not linux.child_pids() or time.monotonic() > deadline:
                break
            time.sleep(0.005)
        for event in self._jobs.release_held(()):
            self._send(event)
        self._flush()
        if self._scratch is not None:
            self._scratch.close()

    # -- events to the supervisor

    def _send(self, event: protocol.Event) -> None:
        if isinstance(event, protocol.Exited):
            if (start := self._starts.take(event.job)) is not None:
                self._outbox.append(protocol.encode(start))
            self._remove_scratch(event.job)  # its processes are gone
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


def _log(text: str) -> None:
    if sys.stderr is not None:
        try:
            sys.stderr.write(f"poolsup forkserver: {text}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def main(argv: list[str] | None = None) -> int:
    parent_pid = os.getppid()
    linux.set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent_pid:
        return 0
    descriptors.ensure_standard_fds()
    parser = argparse.ArgumentParser(prog="python -m sandbox.forkserver")
    parser.add_argument("--control-fd", type=int, required=True)
    table = parser.add_mutually_exclusive_group(required=True)
    # By fd, because a handler's `env` table may hold secrets and argv is public.
    table.add_argument("--handlers-fd", type=int, help="a file holding the handler table")
    table.add_argument("--handlers", help="JSON: {name: {path, function, ...}}")
    parser.add_argument("--idle-limit", type=float, default=SHARED_IDLE_LIMIT,
                        help="seconds a shared child without a job lives on")
    parser.add_argument("--tracing", action="store_true",
                        help="the supervisor traces its jobs: preload OpenTelemetry")
    args = parser.parse_args(argv)
    linux.become_child_subreaper()
    control = socket.socket(fileno=args.control_fd)
    specs = parse_handler_table(args.handlers or _read_fd(args.handlers_fd))
    scratch = ScratchRoot()
    confinements = confinement.prepare_all(specs, os.environ, scratch.jobs, scratch.decoys)
    notes = confinement.sandbox_notes(confinements)
    if args.tracing:  # before the handler files, whose tracers then are the job's
        try:
            tracing.preload()
        except ImportError as exc:
            _log(f"jobs' own spans are not kept: {exc}")
    handlers = preload(specs)  # handler files see our environment as they are imported
    confinement.clear_environment()
    child.open_job_stdio()  # our own too: not opened again in every child
    gc.freeze()  # children then share, rather than copy, the preloaded objects
    try:
        linux.lock_memory()  # a fence must not wait for its enforcer to be swapped in
    except OSError as exc:
        _log(f"memory not locked, swapping may delay fences: {exc}")
    ForkServer(control, handlers, confinements, parent_pid, scratch, notes,
               idle_limit=args.idle_limit).serve()
    return 0


def _read_fd(fd: int) -> str:
    with open(fd, "rb") as file:
        return file.read().decode()


if __name__ == "__main__":
    sys.exit(main())
