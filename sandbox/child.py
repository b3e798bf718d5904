"""What runs in a job's forked child: become a job process, run the handler, report.

The fork server keeps one child forked ahead, waiting for a job (`wait_for_job`), so a
job does not wait for fork. Everything imported here is imported once, in the fork
server, so a child reaches its handler without importing anything.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import selectors
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from types import FrameType, TracebackType
from typing import Any

import orjson

from sandbox import confinement, linux, protocol
from sandbox.confinement import Confinement, ConfinementError
from sandbox.context import Fail, Inbox, Job, Stopped
from sandbox.loader import HandlerSpec, LoadedHandler, load_handler

EXIT_STOPPED = 128 + signal.SIGTERM
_RECV_SIZE = 65536
_ASSIGNMENT_SIZE = 4096


def become_job_process(*, server_pid: int, keep_fd: int, devnull_fd: int) -> None:
    """Right after fork: a session and process group of its own, clean signals and fds.

    The fork server blocked SIGTERM across fork; it stays blocked until the job's own
    SIGTERM handler is in place, so that none is lost.
    """
    os.setsid()
    linux.set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != server_pid:
        os._exit(1)  # the fork server died before the death signal was armed
    # Orphans of the job's processes come to the job, so that when the job dies they
    # come to the fork server, which knows them for leftovers and kills them.
    linux.become_child_subreaper()
    signal.set_wakeup_fd(-1)
    for signum in (signal.SIGCHLD, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.dup2(devnull_fd, 0)
    # 1 and 2 stay (the fork server's) until the job's output replaces them.
    os.closerange(3, keep_fd)
    os.closerange(keep_fd + 1, os.sysconf("SC_OPEN_MAX"))


def wait_for_job(
    assignment: socket.socket,
    handlers: Mapping[str, LoadedHandler],
    confinements: Mapping[str, Confinement],
    server_pid: int,
) -> int:
    """Wait for the fork server to hand over a job, confine this process as the job's
    handler wants, then run the job; return the exit code.

    The hand-over is one packet: the handler's name, with the job's control and output
    sockets attached. End of stream means there will be no job.
    """
    _open_job_stdio()  # now rather than after the hand-over: it takes a while
    data, fds, _, _ = socket.recv_fds(assignment, _ASSIGNMENT_SIZE, 2)
    assignment.close()
    if len(fds) != 2:
        return 0
    control_fd, output_fd = fds
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    os.close(output_fd)
    name = data.decode()
    handler = handlers[name]
    setup_error = _confine(confinements[name], server_pid)
    return main(
        control_fd, name, handler.function, handler.error, handler.spec, setup_error=setup_error
    )


def _confine(settings: Confinement, server_pid: int) -> str | None:
    """Apply the handler's limits and isolation; why it cannot run, if it cannot."""
    if settings.error is not None:
        return settings.error
    try:
        confinement.apply(settings, server_pid=server_pid)
    except ConfinementError as error:
        return str(error)
    return None


def _open_job_stdio() -> None:
    # Line buffered, so that a job's log lines arrive as they are printed. Fds 1 and 2
    # are only names here: they will be the job's output socket when it writes.
    sys.stdout = open(  # noqa: SIM115
        1, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False
    )
    sys.stderr = open(  # noqa: SIM115
        2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False
    )


class ControlChannel:
    """The job's end of its control socket: newline-delimited JSON both ways.

    The main thread, the handler's threads and the reader thread may all send: each
    line goes out whole, under a lock.
    """

    def __init__(self, fd: int) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)
        self._buffer = b""
        self._send_lock = threading.Lock()

    def read_message(self) -> dict[str, Any] | None:
        """The next message, or None at end of stream."""
        while (message := self.buffered_message()) is None:
            if not self.feed():
                return None
        return message

    def buffered_message(self) -> dict[str, Any] | None:
        """A message already received, without reading the socket."""
        if b"\n" not in self._buffer:
            return None
        line, self._buffer = self._buffer.split(b"\n", 1)
        return protocol.decode(line)

    def feed(self) -> bool:
        """Read what the socket has into the buffer; False at end of stream."""
        try:
            data = self.sock.recv(_RECV_SIZE)
        except ConnectionError:
            return False
        self._buffer += data
        return bool(data)

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw_line(protocol.encode_line(message))

    def send_raw_line(self, line: bytes) -> None:
        with self._send_lock:
            self.sock.sendall(line)

    def save_checkpoint(self, value_json: bytes) -> None:
        """Send a checkpoint (JSON text) for the supervisor to store under the lease."""
        self.send_raw_line(b'{"t":"checkpoint","value":' + value_json + b"}\n")

    def acknowledge(self, seq: int) -> None:
        """Tell the supervisor the handler took note `seq`; if it is gone, the stop
        that follows says so."""
        with contextlib.suppress(OSError):
            self.send({"t": protocol.MSG_ACK, "seq": seq})


def main(
    control_fd: int,
    handler_name: str,
    function: Callable[..., Any] | None,
    import_error: str | None,
    spec: HandlerSpec,
    *,
    setup_error: str | None = None,
) -> int:
    """Run one job; return the process exit code.

    0: a result or error message was sent; 1: the job could not run (no start message,
    the handler failed to import or could not be confined) or the supervisor is gone;
    143: stopped by SIGTERM.
    """
    channel = ControlChannel(control_fd)
    start = channel.read_message()
    if start is None or start.get("t") != protocol.MSG_START:
        print(f"poolsup: expected a start message, got {start!r}", file=sys.stderr)
        return 1
    os.environ["POOLSUP_JOB_KEY"] = str(start["key"])
    os.environ["POOLSUP_JOB_TOKEN"] = str(start["token"])
    os.environ["POOLSUP_JOB_ATTEMPT"] = str(start["attempt"])

    if setup_error is not None:
        return _report(channel, {
            "t": protocol.MSG_ERROR,
            "error": f"handler cannot run: {setup_error}",
            "traceback": "",
            "final": True,
        }, code=1)

    inbox = Inbox(acknowledge=channel.acknowledge)
    job = Job(
        key=start["key"],
        payload=start["payload"],
        attempt=start["attempt"],
        token=start["token"],
        inbox=inbox,
        checkpoint=start.get("checkpoint"),
        save_checkpoint=channel.save_checkpoint,
    )
    guard = StopGuard(job, inbox)
    wakeup_fd = guard.install()
    inbox.start_listening = lambda: _start_reader(channel, inbox, wakeup_fd)

    if function is None and import_error is None:
        try:
            function = load_handler(handler_name, spec)
        except BaseException:
            import_error = traceback.format_exc()
    if function is None:
        last_line = (import_error or "").strip().splitlines()[-1:] or ["unknown error"]
        return _report(channel, {
            "t": protocol.MSG_ERROR,
            "error": f"handler file failed to import: {last_line[0]}",
            "traceback": import_error,
            "final": True,
        }, code=1)

    try:
        value = guard.run(function, job)
    except Stopped:
        return EXIT_STOPPED
    except BaseException as exc:
        return _report(channel, _error_message(exc, function))
    try:
        data = orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError) as exc:
        return _report(channel, {
            "t": protocol.MSG_ERROR,
            "error": f"result is not JSON-serializable: {exc}",
            "traceback": "",
            "final": False,
        })
    try:
        # Whether the handler returned in answer to a stop: after a drain or a move,
        # such a value does not end the job (it runs again elsewhere).
        stopping = b"true" if inbox.stop_seen else b"false"
        channel.send_raw_line(b'{"t":"result","stopping":' + stopping + b',"value":' + data
                              + b"}\n")
    except OSError:
        return 1
    return 0


class StopGuard:
    """SIGTERM handling: always marks the job stopping; ends a stop-unaware handler.

    The C-level signal handler writes to a wakeup pipe that the reader thread watches,
    so `wait_stop` wakes at once even while the main thread is busy in C code.
    """

    def __init__(self, job: Job, inbox: Inbox) -> None:
        self._job = job
        self._inbox = inbox
        self._running = False

    def install(self) -> int:
        read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        # The fork server blocks SIGTERM across fork so that none is lost before now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        return read_fd

    def run(self, function: Callable[..., Any], job: Job) -> Any:
        if self._inbox.terminated:
            raise Stopped  # SIGTERM came before the handler started
        self._running = True
        try:
            return _call(function, job)
        finally:
            self._running = False

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self._inbox.terminated = True
        if self._running and not self._job.stop_aware:
            self._running = False
            raise Stopped


def _call(function: Callable[..., Any], job: Job) -> Any:
    if inspect.iscoroutinefunction(function):
        return _run_coroutine(function(job))
    value = function(job)
    if inspect.iscoroutine(value):
        return _run_coroutine(value)
    return value


def _run_coroutine(coroutine: Any) -> Any:
    # Imported here, not at the top: a fork server with asyncio loaded forks slower, so
    # it is preloaded only when some handler is async (loader.preload).
    import asyncio

    return asyncio.run(coroutine)


def _start_reader(channel: ControlChannel, inbox: Inbox, wakeup_fd: int) -> None:
    """Start the reader thread; return once it has taken in what was already sent."""
    caught_up = threading.Event()
    threading.Thread(
        target=_read_control, args=(channel, inbox, wakeup_fd, caught_up), daemon=True
    ).start()
    caught_up.wait()


def _read_control(
    channel: ControlChannel, inbox: Inbox, wakeup_fd: int, caught_up: threading.Event
) -> None:
    """Reader thread: stop and notify messages, SIGTERM wakeups, end of stream."""
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(channel.sock, selectors.EVENT_READ)
            selector.register(wakeup_fd, selectors.EVENT_READ)
            while True:
                while (message := _next_buffered(channel)) is not None:
                    _dispatch(message, inbox)
                events = selector.select(None if caught_up.is_set() else 0)
                if not events:
                    caught_up.set()
                for key, _ in events:
                    if key.fd == wakeup_fd:
                        # One byte per signal, its number; this can come before the
                        # Python-level handler has run in the main thread.
                        if signal.SIGTERM in os.read(wakeup_fd, 512):
                            inbox.request_stop()
                    elif not channel.feed():
                        inbox.request_stop()  # the supervisor is gone
                        return
    finally:
        caught_up.set()


def _next_buffered(channel: ControlChannel) -> dict[str, Any] | None:
    while True:
        try:
            return channel.buffered_message()
        except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
            print(f"poolsup: bad control message: {exc}", file=sys.stderr)


def _dispatch(message: dict[str, Any], inbox: Inbox) -> None:
    kind = message.get("t")
    if kind == protocol.MSG_STOP:
        reason = message.get("reason")
        inbox.request_stop(reason if isinstance(reason, str) else None)
    elif kind == protocol.MSG_NOTIFY:
        seq = message.get("seq")
        inbox.deliver(message.get("payload"), seq if isinstance(seq, int) else None)


def _error_message(exc: BaseException, function: Callable[..., Any]) -> dict[str, Any]:
    if isinstance(exc, SystemExit):
        error = f"handler called sys.exit({exc.code!r})"
    else:
        text = str(exc)
        error = type(exc).__name__ + (f": {text}" if text else "")
    tb = _from_handler(exc.__traceback__, function)
    return {
        "t": protocol.MSG_ERROR,
        "error": error,
        "traceback": "".join(traceback.format_exception(type(exc), exc, tb)),
        "final": isinstance(exc, Fail),
    }


def _from_handler(tb: TracebackType | None, function: Callable[..., Any]) -> TracebackType | None:
    """The traceback from the handler's first frame on, without the sandbox (and asyncio)
    frames above it; or, if the handler's file is not in it, without this module's."""
    code = getattr(function, "__code__", None)
    entry = tb
    while entry is not None and code is not None:
        if entry.tb_frame.f_code.co_filename == code.co_filename:
            return entry
        entry = entry.tb_next
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb


def _report(channel: ControlChannel, message: dict[str, Any], code: int = 0) -> int:
    try:
        channel.send(message)
    except OSError:
        return 1
    return code
