"""One job's child as the supervisor sees it: its sockets, its pid once reported, how
it ended (`ExitStatus`: from the fork server's `exited`, or, for a reused child, its
"done" on its own channel)."""

from __future__ import annotations

import signal
import socket
from dataclasses import dataclass, field

import anyio
import anyio.abc

from supervisor.core.blame import Verdict
from supervisor.doorbell import Doorbell, Latch


@dataclass(frozen=True, kw_only=True)
class ExitStatus:
    code: int | None
    signal: int | None
    fenced: bool
    reason: str | None = None  # a limit the fork server ended the child for
    # What the job left behind that was still alive when the fork server gave up
    # waiting for it to die (normally none: `exited` waits until they are gone).
    survivors: tuple[int, ...] = ()
    # The child died with its fork server: how the fork server ended, and who is held
    # to have caused it (`core.blame`).
    fork_server_died: str | None = None
    verdict: Verdict | None = None
    # Its shared child was killed on another job's account (a fence, a limit, a kill):
    # whose, and why. Nothing of this job's asked for it.
    killed_for: str | None = None

    @property
    def signal_name(self) -> str | None:
        if self.signal is None:
            return None
        try:
            return signal.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"


@dataclass(eq=False, kw_only=True)
class Child:
    """One job's process as the supervisor sees it."""

    job_id: str
    key: str  # the job's key, the same for all its attempts
    forked_at: float  # when the spawn was sent (anyio's clock)
    # Its control and output sockets, read by event-loop callbacks (`SocketFeed`).
    control_socket: socket.socket
    output_socket: socket.socket
    handler: str = ""
    pid: int | None = None
    spawned: Latch = field(default_factory=Latch)
    exited: Latch = field(default_factory=Latch)
    spawn_error: str | None = None
    status: ExitStatus | None = None
    wake: Doorbell | None = None  # its job's: rung when it exits
    jobs_left: int = 0  # jobs it may run, this one included (max_jobs_per_child); 0: not counted
    # A reused child said "done" on its channel: its job is over, it waits for the next.
    done: bool = False
    signalled: bool = False  # a signal or kill was sent for its job: it is not reused
    _control: anyio.abc.SocketStream | None = None

    async def control(self) -> anyio.abc.SocketStream:
        """Its control socket as a stream, to write to (made at the first write: most
        jobs are sent nothing after their start)."""
        if self._control is None:
            self._control = await anyio.abc.UNIXSocketStream.from_socket(self.control_socket)
        return self._control

    def ended(self, status: ExitStatus) -> None:
        """It exited (or died with its fork server), as `status` says. After it said
        "done", only a fence or a limit has the last word (the fork server ended the job
        before it heard `finished`); any other death came after the job was over."""
        if self.done and not status.fenced and status.reason is None:
            self.spawned.set()  # no report of it is coming, if none came
            return  # its channel's end keeps it from being reused
        self.done = False
        self.status = status
        self.spawned.set()
        self.exited.set()
        if self.wake is not None:
            self.wake.ring()

    def reported_done(self) -> None:
        """A reused child said "done" on its channel: its job ended as a clean exit."""
        if self.exited.is_set():
            return
        self.done = True
        self.status = DONE
        self.exited.set()
        if self.wake is not None:
            self.wake.ring()

    def failed(self, error: str) -> None:
        """The fork server could not start it: it ends here."""
        self.spawn_error = error
        self.spawned.set()
        self.exited.set()
        if self.wake is not None:
            self.wake.ring()

    @property
    def never_started(self) -> bool:
        """It was not started: the fork server could not, or was stopped first (not a
        death, after which a child not reported may have run)."""
        return (self.pid is None and self.spawn_error is not None
                and (self.status is None or self.status.fork_server_died is None))

    def close(self) -> None:
        """Close its two sockets, at once (the streams' `aclose` would each yield to the
        event loop, twice per job, for nothing to wait for)."""
        self.control_socket.close()
        self.output_socket.close()


DONE = ExitStatus(code=0, signal=None, fenced=False)
