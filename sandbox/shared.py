"""A shared child: up to `child_concurrency` jobs of one async handler at once, each an
asyncio task of this process (`serve`).

Each job comes with sockets of its own, as a fresh child's does: its control channel
(its start, then stops, notes and stack requests in; its result, checkpoints and acks
out) and its output, where what its task prints or logs through `sys.stdout` and
`sys.stderr` goes (`JobOutput`, by a context variable that the task and the tasks it
starts carry). What C code or a subprocess writes to fds 1 and 2 is the child's: the
fork server's, the supervisor's log.

A stop (a user's, a drain, a move, the timeout, a lost lease) cancels the job's task;
nothing else of the process is touched. A task that will not end is not this
process's business: the fork server fences every job on its own, is told here of each
job's end (`protocol.JobEnded`, after the job's last message is written), and kills
the whole child when a job's fence passes unreported. A job whose step takes the
process over its handler's memory limit is named to the fork server
(`protocol.OverLimit`), which kills the child for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import io
import os
import select
import signal
import socket
import sys
import traceback
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TextIO

import orjson

from sandbox import child as job_child
from sandbox import protocol, raw_signal, step_marks, tracing
from sandbox.channel import ControlChannel
from sandbox.context import EndSchedule, Inbox, Job, Snooze
from sandbox.loader import LoadedHandler
from sandbox.stacks import frame_entries

_READ_SIZE = 65536
_PAGE = os.sysconf("SC_PAGE_SIZE")

_output: contextvars.ContextVar[TextIO | None] = contextvars.ContextVar("poolsup_job_output",
                                                                      default=None)


class JobOutput(io.TextIOBase):
    """`sys.stdout` and `sys.stderr` of a shared child: the output of the job whose task
    (or a task it started) writes, else the child's own."""

    def __init__(self, own: TextIO) -> None:
        self._own = own

    def _target(self) -> TextIO:
        target = _output.get()
        return self._own if target is None else target

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._own.fileno()  # what a subprocess inherits: the child's


class SharedInbox(Inbox):
    """A job's stop and notes, as its task awaits them: a wait must not hold the loop."""

    def __init__(self, acknowledge: Callable[[int], None]) -> None:
        super().__init__(acknowledge=acknowledge)
        self._stopped = asyncio.Event()
        self._notes: asyncio.Queue[tuple[Any, int | None]] = asyncio.Queue()

    def request_stop(self, reason: str | None = None) -> None:
        super().request_stop(reason)
        self._stopped.set()

    @property
    def stop_reason(self) -> str | None:
        """Never waits for a reason: here a stop is its reason's message (a process's
        SIGTERM may come ahead of its reason, and the wait would hold every job)."""
        return (self._stop_reason or "stop") if self.stop_seen else None

    def deliver(self, payload: Any, seq: int | None = None) -> None:
        self._notes.put_nowait((payload, seq))

    async def wait_stop_async(self, timeout: float | None) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopped.wait(), timeout)
        return self._stopped.is_set()

    async def next_note(self, timeout: float | None) -> Any:
        if self._stopped.is_set() and self._notes.empty():
            return None
        note = asyncio.ensure_future(self._notes.get())
        stop = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait({note, stop}, timeout=timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not note.done():
                note.cancel()
        if not note.done() or note.cancelled():
            return None
        payload, seq = note.result()
        if seq is not None and self._acknowledge is not None:
            self._acknowledge(seq)
        return payload


class SharedJob(Job):
    """`job` in a shared child: `wait_stop` and `next_notification` are coroutines."""

    _inbox: SharedInbox

    async def wait_stop(self, timeout: float | None = None) -> bool:  # type: ignore[override]
        self._stop_aware = True
        return await self._inbox.wait_stop_async(timeout)

    async def next_notification(self, timeout: float | None = None) -> Any:
        return await self._inbox.next_note(timeout)


def serve(assignment: socket.socket, fds: list[int], scratch: str, job_id: str, slot: int,
          handler: LoadedHandler, setup_error: str | None) -> int:
    """Run the jobs the fork server hands this child on `assignment`, the first with
    `fds`, until the fork server ends it; never returns on its own but at the end of
    `assignment`."""
    # A stop is a message on the job's channel; a signal meant for a job would end all.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raw_signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGTERM,))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stdout = JobOutput(sys.stdout)
    sys.stderr = JobOutput(sys.stderr)
    host = _Host(assignment, handler, setup_error, slot)
    return asyncio.run(host.serve(fds, scratch, job_id))


class _Host:
    """The child's side of its jobs: each job's task, the fork server's socket (jobs in,
    reports out), and the memory the jobs share."""

    def __init__(self, assignment: socket.socket, handler: LoadedHandler,
                 setup_error: str | None, slot: int) -> None:
        self.slot = slot  # in sandbox.step_marks
        self.handler = handler
        self.setup_error = setup_error  # why its jobs cannot run (confinement), if so
        self.memory_limit = handler.spec.memory_limit
        self._assignment = assignment
        self._statm = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
        self._tasks: set[asyncio.Task[None]] = set()
        self._named_over: set[str] = set()

    def step_ended(self, job_id: str) -> None:
        limit = self.memory_limit
        if limit is not None and self.resident_bytes() > limit:
            self.name_over(job_id)

    def name_over(self, job_id: str) -> None:
        """Tell the fork server that `job_id` took this process over its memory limit."""
        if job_id not in self._named_over:
            self._named_over.add(job_id)
            self.report(protocol.OverLimit(job=job_id))

    async def serve(self, fds: list[int], scratch: str, job_id: str) -> int:
        loop = asyncio.get_running_loop()
        self._assignment.setblocking(False)
        self._start(fds, scratch, job_id)
        ended: asyncio.Future[None] = loop.create_future()

        def assigned() -> None:
            while True:
                try:
                    data, new_fds, _, _ = socket.recv_fds(self._assignment, 4096, 2)
                except BlockingIOError:
                    return
                except OSError:
                    data, new_fds = b"", []
                if not data:
                    loop.remove_reader(self._assignment.fileno())
                    if not ended.done():
                        ended.set_result(None)
                    return
                _, job_scratch, new_id, _ = protocol.read_assignment(data)
                if len(new_fds) == 2:
                    self._start(new_fds, job_scratch, new_id)

        loop.add_reader(self._assignment.fileno(), assigned)
        await ended  # the fork server is gone: so are we
        return 0

    def _start(self, fds: list[int], scratch: str, job_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self._job(fds, scratch, job_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def report(self, message: protocol.Report) -> None:
        data = protocol.encode(message)
        while True:
            try:
                self._assignment.send(data)
                return
            except BlockingIOError:
                select.select([], [self._assignment], [], 1.0)
            except OSError:
                return  # the fork server is gone

    def resident_bytes(self) -> int:
        return int(os.pread(self._statm, 64, 0).split()[1]) * _PAGE

    async def _job(self, fds: list[int], scratch: str, job_id: str) -> None:
        control_fd, output_fd = fds
        channel = _Channel(control_fd)
        output = open(output_fd, "w", buffering=1, encoding="utf-8",  # noqa: SIM115, ASYNC230
                      errors="backslashreplace")  # a socket: opening it does not block
        code = 1
        try:
            code = await _JobRun(self, channel, output, scratch, job_id).run()
        except Exception:  # a bug here costs this job, never its siblings
            traceback.print_exc(file=output)
        finally:
            with contextlib.suppress(OSError, ValueError):
                output.close()
            channel.close()
            self.report(protocol.JobEnded(job=job_id, code=code))


class _Channel(ControlChannel):
    """A job's control socket in a shared child: a process's channel, its lines read by
    the event loop and written without waiting on a full socket for long."""

    def __init__(self, fd: int) -> None:
        super().__init__(fd)
        self.sock.setblocking(False)

    async def next_message(self) -> protocol.Message | None:
        """The next message; None at the end of stream. A line this side cannot read (a
        newer supervisor's kind) is skipped."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                message = self.buffered_message()
            except ValueError:
                continue
            if message is not None:
                return message
            try:
                data = await loop.sock_recv(self.sock, _READ_SIZE)
            except OSError:
                data = b""
            if not data:
                return None
            self._buffer += data

    def send_raw_line(self, line: bytes) -> None:
        """Written whole, now: a line is small, and the supervisor reads as they come."""
        view = memoryview(line)
        with self._send_lock:
            while view:
                try:
                    view = view[self.sock.send(view):]
                except BlockingIOError:
                    select.select([], [self.sock], [], 1.0)

    def send(self, message: protocol.Message) -> None:
        with contextlib.suppress(OSError):  # the supervisor is gone: its fence ends us
            super().send(message)

    def close(self) -> None:
        self.sock.close()


class _JobRun:
    """One job's way in a shared child: its start, its task, its end."""

    def __init__(self, host: _Host, channel: _Channel, output: TextIO, scratch: str,
                 job_id: str) -> None:
        self._host = host
        self._channel = channel
        self._output = output
        self._scratch = scratch
        self._job_id = job_id
        self._task: asyncio.Task[Any] | None = None
        self._coroutine: Coroutine[Any, Any, Any] | None = None

    async def run(self) -> int:
        start = await self._channel.next_message()
        if not isinstance(start, protocol.Start):
            return 1
        host, channel = self._host, self._channel
        if host.setup_error is not None:
            channel.send(protocol.Error(error=f"handler cannot run: {host.setup_error}",
                                        final=True))
            return 1
        function = host.handler.function
        if function is None:
            last = (host.handler.error or "").strip().splitlines()[-1:] or ["unknown error"]
            channel.send(protocol.Error(error=f"handler file failed to import: {last[0]}",
                                        traceback=host.handler.error, final=True))
            return 1
        inbox = SharedInbox(acknowledge=channel.acknowledge)
        job = SharedJob(key=start.key, payload=start.payload, attempt=start.attempt,
                        token=start.token, inbox=inbox, checkpoint=start.checkpoint,
                        save_checkpoint=channel.save_checkpoint, scratch=self._scratch)
        context = contextvars.copy_context()
        context.run(_output.set, self._output)
        attempt_span = _traced(start, context)
        self._coroutine = function(job)
        watched = (self._coroutine if self._host.memory_limit is None
                   else _Watched(self._coroutine, self._host, self._job_id).run())
        self._task = asyncio.get_running_loop().create_task(watched, context=context)
        listener = asyncio.get_running_loop().create_task(self._listen(inbox))
        try:
            value = await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if self._task.cancelled() and inbox.stop_seen:
                return job_child.EXIT_STOPPED
            raise
        except Snooze as snooze:
            channel.send(protocol.Snooze(seconds=snooze.seconds))
            return 0
        except EndSchedule:
            channel.send(protocol.EndSchedule())
            return 0
        except BaseException as exc:  # the handler's: its error
            channel.send(job_child.error_message(exc, function))
            return 0
        finally:
            listener.cancel()
            with contextlib.suppress(OSError, ValueError):
                self._output.flush()
            if attempt_span is not None:
                _send_spans(channel, attempt_span)
        try:
            data = orjson.dumps(value)
        except (TypeError, orjson.JSONEncodeError) as exc:
            channel.send(protocol.Error(error=f"result is not JSON-serializable: {exc}"))
            return 0
        with contextlib.suppress(OSError):
            channel.send_raw_line(protocol.result_line(data, stopping=inbox.stop_seen))
        return 0

    async def _listen(self, inbox: SharedInbox) -> None:
        """The job's control channel after its start: a stop cancels its task."""
        while (message := await self._channel.next_message()) is not None:
            match message:
                case protocol.Stop(reason=reason):
                    inbox.request_stop(reason if isinstance(reason, str) else None)
                    if self._task is not None:
                        self._task.cancel()
                case protocol.Notify(payload=payload, seq=seq):
                    inbox.deliver(payload, seq if isinstance(seq, int) else None)
                case protocol.ThreadStacks():
                    self._channel.send(protocol.ThreadStacks(threads=[self._stack()]))
        inbox.request_stop()  # the supervisor is gone
        if self._task is not None:
            self._task.cancel()

    def _stack(self) -> dict[str, Any]:
        """The job's task's stack, from the handler's coroutine down to where it waits."""
        frames = []
        awaited: Any = self._coroutine
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is not None:
                frames.extend(traceback.extract_stack(frame)[-1:])
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
        return {"thread": f"task of job {self._job_id}", "main": True,
                "frames": frame_entries(frames)}



def _traced(start: protocol.Start, context: contextvars.Context) -> int | None:
    """A traced job's span context made current in its task's `context`: the id of its
    attempt's span (None: not traced, or no SDK here)."""
    if not isinstance(start.trace, dict):
        return None
    if "sandbox.otel_child" not in sys.modules:
        try:
            tracing.preload()
        except ImportError:
            return None
    from sandbox import otel_child

    extracted, attempt_span = otel_child.job_context(start.trace)
    context.run(otel_child.attach, extracted)
    return attempt_span


def _send_spans(channel: _Channel, attempt_span: int) -> None:
    """The job's spans, with its last message (`spans`, as a process's are)."""
    from sandbox import otel_child

    if (line := otel_child.job_spans_line(attempt_span)) is not None:
        with contextlib.suppress(OSError):
            channel.send_raw_line(line)


class _Watched:
    """A job's coroutine driven step by step, the host told whose step runs (for its
    memory limit)."""

    def __init__(self, coroutine: Coroutine[Any, Any, Any], host: _Host, job_id: str) -> None:
        self._coroutine = coroutine
        self._host = host
        self._job_id = job_id

    def _after_step(self) -> None:
        self._host.step_ended(self._job_id)

    async def run(self) -> Any:
        return await self

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine = self._coroutine
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            step_marks.mark(self._host.slot, self._job_id)
            try:
                yielded = coroutine.send(sent) if thrown is None else coroutine.throw(thrown)
            except StopIteration as stop:
                self._after_step()
                return stop.value
            finally:
                thrown = None
                step_marks.clear(self._host.slot)
            self._after_step()
            try:
                sent = yield yielded
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as error:  # a cancel, thrown in at the await
                thrown, sent = error, None
