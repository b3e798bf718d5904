"""The supervisor's side of the fork server: spawn, fence, signal and reap children.

The fork server is a separate process (`python -m sandbox.forkserver`) that has
already imported the sandbox and the handler files, forks one child per job, and kills
any child whose fence deadline passes.  Because it is not this process, the fence holds
even when the supervisor's event loop is frozen or stuck.

A child of a handler with max_jobs_per_child > 1 is this process's direct peer after its
first job: it says "done" on its own channel, waits there (`IdleChildren`), and its next
job starts there, without a hop through the fork server (`ForkServerClient.start`); the
fork server is told first, so that it fences that job as any other.

A dead fork server's leftovers are the business of `supervisor.forks.orphans`.
"""

from __future__ import annotations

import _socket
import array
import asyncio
import itertools
import logging
import os
import signal
import socket
import subprocess
from collections.abc import Mapping
from contextlib import suppress
from typing import Any, Protocol

import anyio
import anyio.abc

from sandbox import protocol
from supervisor.core.blame import Blame, Verdict
from supervisor.doorbell import Doorbell
from supervisor.errors import PoolsupError
from supervisor.forks import orphans
from supervisor.forks.child import Child, ExitStatus
from supervisor.forks.idle_children import IDLE_LIMIT, IdleChild, IdleChildren

log = logging.getLogger("poolsup.children")

EXIT_STATUS_WAIT = 1.0
EVENTS_PER_CALL = 64  # read at one callback, at most (the loop has other work)
# A "done" child's `finished` notice waits this long for a request to carry it, most
# often the assignment of the child's next job, a claim's round trip later: one wake-up
# of the fork server per reused job instead of two. Until it comes, the fork server
# fences the job that ended as before, whose lease runs for seconds yet.
FINISHED_NOTICE_WAIT = 0.005
# A successor is fenced from its spawn until its `finished` notice, which follows the
# fork server's report in milliseconds; a supervisor frozen meanwhile loses only it.
SUCCESSOR_FENCE = 60.0


class ForkServerDied(PoolsupError):
    """The fork server exited; its children were killed with it."""


def _pair() -> tuple[socket.socket, int]:
    """A connected pair of stream sockets: ours as a socket, the child's end as a bare
    descriptor, only passed on and closed (a socket object for it would cost a
    getsockname and some calls, twice a job)."""
    ours, theirs = _socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, ours.detach()), theirs.detach()


class Referee(Protocol):
    """Who pays for a fork server's death (`core.blame`), and the pace of forks that
    keeps the next death judgeable."""

    async def before_fork(self, key: str) -> None: ...

    def judge(self, forked_at: Mapping[str, float]) -> Mapping[str, Verdict]: ...


class BlameTheLast:
    """A referee without memory, for a fork server used on its own."""

    async def before_fork(self, key: str) -> None:
        pass

    def judge(self, forked_at: Mapping[str, float]) -> Mapping[str, Verdict]:
        last = max(forked_at, key=lambda key: forked_at[key], default=None)
        return {key: Verdict(Blame.BLAMED if key == last else Blame.BYSTANDER)
                for key in forked_at}


class ForkServerClient:
    """The supervisor's end of a running fork server (`sandbox.forkserver.ForkServer`):
    the children it holds, as the supervisor sees them."""

    def __init__(
        self, process: subprocess.Popen[bytes], sock: socket.socket,
        referee: Referee | None = None, idle_limit: float = IDLE_LIMIT,
        jobs_per_child: Mapping[str, int] | None = None,
    ) -> None:
        self._process = process
        self._sock = sock
        self._referee = BlameTheLast() if referee is None else referee
        self.started_at = anyio.current_time()
        self.forked = False  # a spawn was sent: a job ran in it (and may have killed it)
        self._children: dict[str, Child] = {}
        self._ready = anyio.Event()
        self.handler_errors: dict[str, str | None] = {}
        # Per handler, what its sandbox could not enforce on this host (sandbox.policy).
        self.sandbox_notes: dict[str, str] = {}
        self.alive = True
        self._closing = False
        # fast_acquire: a free lock is taken without a trip through the event loop.
        self._send_lock = anyio.Lock(fast_acquire=True)
        self._pongs: dict[int, anyio.Event] = {}
        self._ping_seq = 0
        self.died = anyio.Event()
        self._reading: asyncio.AbstractEventLoop | None = None  # calls back when readable
        self._idle = IdleChildren(idle_limit)
        # Jobs whose reused child said "done", for the fork server: sent with the next
        # request, or at the end of the loop's iteration (`_send_notices`).
        self._finished: list[str] = []
        self._notices_due = False
        # max_jobs_per_child by handler, for the reused ones: a child's last job starts
        # its successor (`_start_successor`), spawned without a job.
        self._jobs_per_child = {name: jobs for name, jobs in (jobs_per_child or {}).items()
                                if jobs > 1}
        self._successors: set[str] = set()
        self._successor_ids = (f"successor-{n}" for n in itertools.count(1))

    @property
    def pid(self) -> int:
        return self._process.pid

    async def wait_ready(self) -> None:
        """Until the fork server has preloaded the handlers (or died trying)."""
        if not self._ready.is_set():  # else not even a trip through the event loop
            await self._ready.wait()

    @property
    def child_count(self) -> int:
        """Children spawned and not yet seen to exit."""
        return len(self._children)

    async def spawn(
        self, job_id: str, handler: str, fence_deadline: float, *, first_message: bytes,
        key: str | None = None, wake: Doorbell | None = None,
    ) -> Child:
        """Fork a child for `handler`, fenced from birth at `fence_deadline` (on
        `protocol.fence_clock`, CLOCK_BOOTTIME), with `first_message` already waiting
        on its control socket.  Raises ForkServerDied if the spawn could not be sent;
        once it was, a fork server that dies before reporting the child returns it
        as exited (`ExitStatus.fork_server_died`): it may have run.  `wake` rings when
        the child exits."""
        child, unsent = await self._send_spawn(job_id, handler, fence_deadline,
                                               first_message=first_message, key=key, wake=wake)
        return await self._reported(child, unsent)

    async def start(
        self, job_id: str, handler: str, fence_deadline: float, *, first_message: bytes,
        key: str | None = None, wake: Doorbell | None = None,
    ) -> Child:
        """`spawn`, without waiting for the fork server's report when the first message
        went whole: the child then exits at once if it could not be started
        (`Child.never_started`, and `wake` rings), and its pid comes with the report.
        A job of a handler with a reused child waiting runs in that child (`_reuse`)."""
        if self._idle and (idle := self._idle.take_waiting(handler)) is not None:
            return await self._reuse(idle, job_id, handler, fence_deadline,
                                     first_message=first_message, key=key, wake=wake)
        child, unsent = await self._send_spawn(job_id, handler, fence_deadline,
                                               first_message=first_message, key=key, wake=wake)
        if unsent:  # the rest is written once the child reads: only if it runs
            return await self._reported(child, unsent)
        return child

    async def _reuse(
        self, idle: IdleChild, job_id: str, handler: str, fence_deadline: float, *,
        first_message: bytes, key: str | None, wake: Doorbell | None,
    ) -> Child:
        """Start a job in an idle reused child, on the child's own channel.

        The fork server must know the job's fence before the child can start the job:
        the assignment (the job, the child, the deadline) is written to the fork
        server's socket before the start is written to the child's. The fork server
        reads its socket in order and fences on its own clock, so a supervisor frozen
        right after the start, even for good, still leaves it the assignment to read
        and the child to kill when the fence passes (at once, if it passed already:
        `ForkServer._assign`). A job whose fence passed before the assignment is not
        started. The child takes only a start (`sandbox.child.next_start`), so nothing
        of it runs before that. A child gone meanwhile never runs the job: the write
        fails (`Child.never_started`). The fork server answers `spawn_failed` when the
        child no longer waits: gone, or killed for its last job's fence or a limit, which
        may have come after our check and before the child read the start (a moment of
        the job may have run before SIGKILL landed); the job ends as a crash, its
        attempt spent."""
        key = job_id if key is None else key
        await self._referee.before_fork(key)
        if not self.alive:
            idle.close()
            raise ForkServerDied()
        if fence_deadline <= protocol.fence_clock():
            self._idle.put(handler, idle, asyncio.get_running_loop().time())
            raise PoolsupError("its lease ran out before the start: not started")
        child = Child(job_id=job_id, key=key, forked_at=asyncio.get_running_loop().time(),
                      control_socket=idle.control, output_socket=idle.output,
                      handler=handler, pid=idle.pid, wake=wake, jobs_left=idle.jobs_left)
        child.spawned.set()
        self._children[job_id] = child
        try:
            await self._send(protocol.Assign(job=job_id, pid=idle.pid, deadline=fence_deadline))
        except BaseException:
            self._children.pop(job_id, None)
            child.close()
            raise
        self.forked = True
        try:
            unsent = first_message[child.control_socket.send(first_message):]
        except BlockingIOError:
            unsent = first_message
        except OSError as error:  # it died waiting: the job never reached it
            self._children.pop(job_id, None)
            child.pid = None
            child.failed(f"its reused child was gone ({error})")
            return child
        if unsent:
            await (await child.control()).send(unsent)
        if idle.jobs_left == 1:  # its last job: it exits at the end of it
            await self._start_successor(handler)
        return child

    async def _start_successor(self, handler: str) -> None:
        """Spawn a child for `handler` with no job: once the fork server reports it, it
        waits among the idle children like one that said "done", confined and ready, so
        that the job after a child's last one does not pay a fresh child's start (its
        confinement and first pages, 2-3 ms) on its way. The fork server fences it from
        birth like any spawn, until the `finished` notice makes it idle; it runs nothing
        before a start comes on its channel."""
        successor = next(self._successor_ids)
        self._successors.add(successor)
        try:
            await self._send_spawn(successor, handler, protocol.fence_clock() + SUCCESSOR_FENCE,
                                   first_message=b"", key=successor, wake=None)
        except PoolsupError:  # a fork server gone: the next job spawns as it would have
            self._successors.discard(successor)

    def _successor_reported(self, child: Child) -> None:
        """A successor's spawn answered: keep it idle, or close it if it failed."""
        self._successors.discard(child.job_id)
        self._children.pop(child.job_id, None)
        if child.pid is None or child.spawn_error is not None or not self.alive:
            child.close()
            return
        self._notice_finished(child.job_id)
        self._idle.keep(child.handler, IdleChild(
            pid=child.pid, control=child.control_socket, output=child.output_socket,
            jobs_left=child.jobs_left))

    def done_with(self, child: Child, *, reusable: bool) -> None:
        """The job of `child` ended and its supervision is over: keep the child for the
        next job of its handler if it said "done" and `reusable` (nothing of the job's
        left on its channel), else close its sockets. The fork server hears of a "done"
        child with the next request, or FINISHED_NOTICE_WAIT later."""
        self._children.pop(child.job_id, None)
        if not child.done:
            child.close()
            return
        self._notice_finished(child.job_id)
        if not reusable or child.signalled or not self.alive or child.pid is None:
            child.close()  # it exits at the end of stream
            return
        self._idle.keep(child.handler, IdleChild(pid=child.pid, control=child.control_socket,
                                                 output=child.output_socket,
                                                 jobs_left=max(0, child.jobs_left - 1)))

    def _notice_finished(self, job_id: str) -> None:
        self._finished.append(job_id)
        if not self._notices_due:
            self._notices_due = True
            asyncio.get_running_loop().call_later(FINISHED_NOTICE_WAIT, self._send_notices)

    def _send_notices(self) -> None:
        """Send the `finished` notices no request carried, unless one waiting for room
        in the socket will."""
        self._notices_due = False
        if self._finished and self.alive and not self._send_lock.locked():
            with suppress(ForkServerDied):
                if not self._sent(None, []):  # full: the next request carries them
                    self._notices_due = True
                    asyncio.get_running_loop().call_later(0.01, self._send_notices)

    async def _send_spawn(
        self, job_id: str, handler: str, fence_deadline: float, *, first_message: bytes,
        key: str | None, wake: Doorbell | None,
    ) -> tuple[Child, bytes]:
        """The child the spawn was sent for, and what of `first_message` did not fit in
        its socket."""
        await self.wait_ready()
        key = job_id if key is None else key
        await self._referee.before_fork(key)
        if not self.alive:
            raise ForkServerDied()
        control_parent, control_child = _pair()
        output_parent, output_child = _pair()
        try:
            # Written before the spawn, what fits in the socket's buffer (normally all of
            # it) waits for the child, which reads it at once; the rest follows the spawn.
            control_parent.setblocking(False)
            output_parent.setblocking(False)  # read by an event-loop callback
            try:
                unsent = first_message[control_parent.send(first_message):]
            except BlockingIOError:
                unsent = first_message
            child = Child(
                job_id=job_id,
                key=key,
                handler=handler,
                forked_at=asyncio.get_running_loop().time(),  # anyio.current_time()
                control_socket=control_parent,
                output_socket=output_parent,
                wake=wake,
                jobs_left=self._jobs_per_child.get(handler, 0),
            )
            self._children[job_id] = child
            # The first fence travels with the spawn: the child never runs unfenced.
            message = protocol.Spawn(job=job_id, handler=handler, deadline=fence_deadline)
            try:
                await self._send(message, fds=[control_child, output_child])
            except BaseException:
                self._children.pop(job_id, None)
                child.close()
                raise
            self.forked = True
        finally:
            os.close(control_child)
            os.close(output_child)
        return child, unsent

    async def _reported(self, child: Child, unsent: bytes) -> Child:
        """`child` once the fork server reported it, and the rest of its first message
        written; PoolsupError if it could not be started."""
        await child.spawned.wait()
        if child.status is not None and child.status.fork_server_died is not None:
            return child  # it died with the fork server before it was reported
        if child.spawn_error is not None:
            self._children.pop(child.job_id, None)
            child.close()
            raise PoolsupError(f"could not start a child: {child.spawn_error}")
        if unsent:
            await (await child.control()).send(unsent)
        return child

    async def fence(self, job_ids: list[str], deadline: float) -> None:
        """Move the fence of `job_ids` to `deadline`, on `protocol.fence_clock`."""
        if job_ids and self.alive:
            await self._send(protocol.Fence(jobs=job_ids, deadline=deadline))

    async def signal(self, job_id: str, signum: int) -> None:
        self._signalled(job_id)
        if self.alive:
            await self._send(protocol.Signal(job=job_id, signal=signum))

    async def ask_stacks(self, job_id: str) -> None:
        """The job's process sends its thread stacks on its control channel."""
        if self.alive:
            await self._send(protocol.AskStacks(job=job_id))

    async def kill(self, job_id: str) -> None:
        self._signalled(job_id)
        if self.alive:
            await self._send(protocol.Kill(job=job_id))

    def _signalled(self, job_id: str) -> None:
        """A signal for a reused child's job may come after the job: its child is not
        reused (the signal would reach the next job)."""
        child = self._children.get(job_id)
        if child is not None:
            child.signalled = True

    async def ping(self, timeout: float) -> bool:
        """Whether the fork server answers within `timeout`: its loop, which also
        enforces fences and limits, is turning."""
        if not self.alive:
            return False
        self._ping_seq += 1
        seq = self._ping_seq
        pong = self._pongs[seq] = anyio.Event()
        try:
            with anyio.move_on_after(timeout):
                await self._send(protocol.Ping(seq=seq))
                await pong.wait()
        except ForkServerDied:
            pass
        finally:
            del self._pongs[seq]
        return pong.is_set() and self.alive

    async def _send(self, message: protocol.Request, fds: list[int] | None = None) -> None:
        ancillary = []
        if fds:
            ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        if not self._send_lock.locked() and self._sent(message, ancillary):
            return  # no writer was waiting for room: sent without the lock (some 30 calls)
        async with self._send_lock:  # one writer at a time: anyio allows one waiter
            while not self._sent(message, ancillary):
                await anyio.wait_writable(self._sock)

    def _sent(self, message: protocol.Request | None, ancillary: list[Any]) -> bool:
        """Whether the packet went out (False: the socket is full, nothing was sent):
        the `finished` notices not sent yet, then `message`, in one packet."""
        if self._finished:
            requests: list[protocol.Request] = [protocol.Finished(jobs=self._finished)]
            if message is not None:
                requests.append(message)
            data = protocol.encode_requests(requests)
        elif message is not None:
            data = protocol.encode(message)
        else:
            return True
        try:
            self._sock.sendmsg([data], ancillary)
            self._finished = []
            return True
        except BlockingIOError:
            return False
        except OSError as error:
            self.alive = False
            raise ForkServerDied(f"fork server unreachable: {error}") from error

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Read the fork server's events until it exits.  The event loop calls back when
        its socket is readable, and every event waiting is handled then: no task wakes
        (and no reader is added and removed) per event."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            try:
                for _ in range(EVENTS_PER_CALL):
                    try:
                        packet = self._sock.recv(protocol.MAX_PACKET)
                    except BlockingIOError:
                        return
                    except OSError:
                        packet = b""
                    if not packet:
                        self._stop_reading()
                        if not ended.done():
                            ended.set_result(None)
                        return
                    try:
                        event = protocol.decode_event(packet)
                    except protocol.UnknownMessage:
                        continue  # a newer fork server's: nothing this side waits for
                    self._handle(event)
            except Exception as error:  # a bug here ends the serving, as it would a task
                self._stop_reading()
                if not ended.done():
                    ended.set_exception(error)

        loop.add_reader(self._sock.fileno(), readable)
        self._reading = loop
        task_status.started()
        try:
            await ended
        finally:
            self._stop_reading()
            with anyio.CancelScope(shield=True):
                await self._on_death()

    def _stop_reading(self) -> None:
        """No more callbacks for the socket (before it is closed: its number may be
        reused)."""
        if self._reading is not None:
            self._reading.remove_reader(self._sock.fileno())
            self._reading = None

    def _handle(self, event: protocol.Event) -> None:
        if isinstance(event, protocol.Ready):
            self.handler_errors = dict(event.handlers)
            self.sandbox_notes = dict(event.sandbox)
            self._ready.set()
            return
        if isinstance(event, protocol.Pong):
            pong = self._pongs.get(event.seq)
            if pong is not None:
                pong.set()
            return
        child = self._children.get(event.job)
        if child is None:
            return
        if isinstance(event, protocol.Spawned):
            child.pid = event.pid
            child.spawned.set()
            if child.job_id in self._successors:
                self._successor_reported(child)
        elif isinstance(event, protocol.SpawnFailed):
            self._children.pop(child.job_id, None)
            child.failed(event.error)
            if child.job_id in self._successors:
                self._successor_reported(child)
        else:
            status = ExitStatus(
                code=event.code,
                signal=event.signal,
                fenced=event.fenced,
                reason=event.reason,
                survivors=tuple(event.survivors or ()),
                killed_for=event.killed_for,
            )
            if status.survivors:
                log.error(
                    "job %s: processes it left behind survived SIGKILL: %s",
                    child.job_id, ", ".join(map(str, status.survivors)),
                )
            self._children.pop(child.job_id, None)
            child.ended(status)

    async def _on_death(self) -> None:
        """Mark every child left exited, once it and what it started are dead."""
        if self.alive and not self._closing:
            log.error("fork server (pid %s) exited; its children died with it", self.pid)
        self.alive = False
        self._idle.close_all()
        self._ready.set()
        for pong in self._pongs.values():
            pong.set()  # no answer is coming: a ping waiting for one returns now
        if self._children:
            known = [child.pid for child in self._children.values() if child.pid is not None]
            survivors = await orphans.kill_orphans(known, fork_server_pid=self.pid)
            if survivors:
                log.error(
                    "processes of the dead fork server's jobs survived SIGKILL for %g s: %s",
                    orphans.ORPHAN_KILL_TIMEOUT, ", ".join(map(str, survivors)),
                )
        self.died.set()
        children = list(self._children.values())
        self._children.clear()
        how = await self._how_it_ended() if children and not self._closing else None
        verdicts = (self._referee.judge({child.key: child.forked_at for child in children})
                    if how else {})
        for child in children:
            if how is None:
                child.spawn_error = child.spawn_error or "fork server exited"
            child.ended(ExitStatus(code=None, signal=signal.SIGKILL, fenced=False,
                                   fork_server_died=how, verdict=verdicts.get(child.key)))
            if child.job_id in self._successors:  # no job's task closes its sockets
                child.close()
        self._successors.clear()

    async def _how_it_ended(self) -> str:
        """The fork server's exit, for its jobs' errors (it is normally dead by now)."""
        with anyio.move_on_after(EXIT_STATUS_WAIT):
            while self._process.poll() is None:  # noqa: ASYNC110 - a zombie within ms
                await anyio.sleep(0.01)
        code = self._process.returncode
        if code is None:
            return "its socket closed"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    async def close(self, timeout: float = 5.0) -> None:
        """Kill every child, stop the fork server and reap it."""
        self._closing = True
        self._idle.close_all()
        if self.alive:
            with suppress(ForkServerDied):
                await self._send(protocol.Exit())
        self._stop_reading()
        self._sock.close()
        try:
            await anyio.to_thread.run_sync(self._process.wait, timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            await anyio.to_thread.run_sync(self._process.wait)
        orphans.fork_server_pids.discard(self._process.pid)
