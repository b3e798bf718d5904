"""What runs in a job's forked child: become a job process, run the handler, report.

The fork server keeps one child forked ahead, waiting for a job (`wait_for_job`), so a
job does not wait for fork. Everything imported here is imported once, in the fork
server, so a child reaches its handler without importing anything.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Collection, Mapping
from types import TracebackType
from typing import Any

import orjson

from sandbox import confinement, job_io, linux, protocol, raw_signal, reuse, tracing
from sandbox.channel import ControlChannel
from sandbox.confinement import Confinement, ConfinementError
from sandbox.context import EndSchedule, Fail, Inbox, Job, Snooze, Stopped
from sandbox.job_io import JobTraces, StopGuard, start_reader
from sandbox.loader import HandlerSpec, LoadedHandler, load_handler
from sandbox.process_state import ProcessState
from sandbox.scratch import JobDirectory, end_job_directory, make_job_directory
from sandbox.stacks import install_stack_reporter

EXIT_STOPPED = 128 + signal.SIGTERM
_ASSIGNMENT_SIZE = 4096
_REHEARSAL_VARIABLE = "POOLSUP_JOB_KEY"
_SANDBOX_FILES = frozenset({__file__, job_io.__file__, tracing.__file__,
                            os.path.join(os.path.dirname(__file__), "shared.py"),
                            os.path.join(os.path.dirname(__file__), "otel_child.py")})


def become_job_process(*, server_pid: int, keep_fds: Collection[int], devnull_fd: int) -> None:
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
        raw_signal.set_handler(signum, raw_signal.SIG_DFL)
    raw_signal.set_handler(signal.SIGINT, signal.default_int_handler)
    os.dup2(devnull_fd, 0)
    # 1 and 2 stay (the fork server's) until the job's output replaces them.
    low = 3
    for fd in sorted(keep_fds):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def wait_for_job(
    assignment: socket.socket,
    handlers: Mapping[str, LoadedHandler],
    confinements: Mapping[str, Confinement],
    server_pid: int,
    *,
    confined_for: str | None = None,
) -> int:
    """Wait for the fork server to hand over a job, confine this process as the job's
    handler wants, then run the job (or, for a handler with max_jobs_per_child > 1,
    jobs one after another: `_run_jobs`); return the exit code. A child forked
    `confined_for` a handler confines itself first, then waits: the fork server hands
    it only that handler's jobs, and it runs no other.

    The hand-over is one packet: the handler's name and the job's scratch directory
    (`protocol.assignment`), with the job's control and output sockets attached. End
    of stream means there will be no job. The fork server hands over nothing more: a
    reused child's next jobs come on its control socket.
    """
    setup_error: str | None = None
    if confined_for is not None:
        _keep_ruleset_of(confined_for, confinements)
        setup_error = _confine(confinements[confined_for], server_pid)
    rehearse_job_start()
    data, fds, _, _ = socket.recv_fds(assignment, _ASSIGNMENT_SIZE, 2)
    if len(fds) != 2:
        return 0
    name, scratch, job_id, slot = protocol.read_assignment(data)
    handler = handlers[name]
    if handler.spec.child_concurrency > 1 and confined_for is None:
        _keep_ruleset_of(name, confinements)
        setup_error = _confine(confinements[name], server_pid)
        # Preloaded by the fork server when a handler shares its children (loader.preload):
        # with asyncio loaded, it forks slower, so it is not loaded otherwise.
        from sandbox import shared

        return shared.serve(assignment, fds, scratch, job_id, slot, handler, setup_error)
    assignment.close()
    if confined_for is None:
        _keep_ruleset_of(name, confinements)
        if handler.spec.max_jobs_per_child > 1:
            return _run_jobs(fds, name, scratch, handler, confinements[name], server_pid)
        setup_error = _confine(confinements[name], server_pid)
    elif name != confined_for:
        return 1  # never sent: confined for another handler, it must not run this one
    return _run_job(fds, name, scratch, handler, setup_error, confinements[name].strict)


def rehearse_job_start() -> None:
    """In a child waiting for its job: go once through what the job's first steps write
    to (a start decoded, the environment, the job's objects), with nothing kept. A
    forked child copies each page it first writes of those it shares with the fork
    server (hundreds before a handler's first line, 2-3 us each); written here, they are
    copied off the job's way. Changes nothing the job could see."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    channel = ControlChannel(theirs.detach())
    with ours, channel.sock:
        ours.sendall(protocol.encode_line(protocol.Start(key="", payload=None, token=0,
                                                         attempt=0)))
        start = channel.read_message()
        before = os.environ.get(_REHEARSAL_VARIABLE)
        os.environ[_REHEARSAL_VARIABLE] = str(start)
        if before is None:
            del os.environ[_REHEARSAL_VARIABLE]
        else:
            os.environ[_REHEARSAL_VARIABLE] = before
        inbox = Inbox(acknowledge=channel.acknowledge)
        job = Job(key="", payload=None, attempt=0, token=0, inbox=inbox,
                  save_checkpoint=channel.save_checkpoint)
        StopGuard(job, inbox)
        channel.send_raw_line(protocol.result_line(orjson.dumps(None), stopping=False))


def _keep_ruleset_of(name: str, confinements: Mapping[str, Confinement]) -> None:
    """Close the Landlock rulesets of the other handlers."""
    for other, settings in confinements.items():
        if other != name:
            settings.sandbox.close()


def _run_job(
    fds: list[int],
    name: str,
    scratch: str,
    handler: LoadedHandler,
    setup_error: str | None,
    strict: bool,
) -> int:
    control_fd, output_fd = fds
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    os.close(output_fd)
    _scratch_environment(scratch, strict)
    return main(ControlChannel(control_fd), name, handler.function, handler.error,
                handler.spec, setup_error=setup_error, scratch=scratch)


def _scratch_environment(scratch: str, strict: bool) -> None:
    if scratch:
        os.environ["POOLSUP_JOB_SCRATCH"] = scratch
        if strict:  # where temporary files can be written
            os.environ["TMPDIR"] = scratch


def _run_jobs(
    fds: list[int],
    name: str,
    directory: str,
    handler: LoadedHandler,
    settings: Confinement,
    server_pid: int,
) -> int:
    """Run up to max_jobs_per_child jobs of one handler, one after another, each in a
    clean process (`sandbox.reuse`) and a scratch directory of its own (made in
    `directory`, the child's; the last job's under a new name, if it left it as it got
    it: `sandbox.scratch.end_job_directory`); the exit code of the last.

    Every job comes on the child's one control socket, its output goes to its one
    output socket: the supervisor is this process's peer. After a job that may be
    followed by another, `done` on the control socket tells the supervisor that the
    job is over, its output all written, and this process clean; the next job starts
    with its `start` there (the fork server was told first, and fences it). A job after
    which the process cannot be made clean is this process's last: it exits, as
    one-job children do, and the fork server reports the job's exit. A child spawned
    as a successor (`ForkServerClient._start_successor`) is confined and waits for its
    first job's start the same way.
    """
    control_fd, output_fd = fds
    channel = ControlChannel(control_fd)
    pristine = reuse.Pristine.capture()
    setup_error = _confine(settings, server_pid)
    job_start = ProcessState.capture()  # as confined: nice and limits are the handler's
    memory_limit = handler.spec.memory_limit
    set_aside: JobDirectory | None = None  # the last job's, left as it was made
    for number in range(1, handler.spec.max_jobs_per_child + 1):
        # Made ready while it waits for its job: its output, its scratch directory.
        if number > 1:
            setup_error = _renew(settings, pristine.cwd_fd)
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        job_directory = None
        if directory:
            try:
                job_directory = make_job_directory(directory, number, set_aside)
            except OSError as error:
                setup_error = setup_error or f"no scratch directory: {error}"
        set_aside = None
        scratch = "" if job_directory is None else job_directory.path
        _scratch_environment(scratch, settings.strict)
        if (start := next_start(channel)) is None:
            return 0  # the supervisor retired this child (or a successor), or is gone
        traces = JobTraces()
        channel.holds_last = number < handler.spec.max_jobs_per_child
        code = main(channel, name, handler.function, handler.error, handler.spec,
                    setup_error=setup_error, traces=traces, scratch=scratch, start=start)
        if not channel.holds_last:
            break
        stop_seen = traces.stop_seen
        try:
            retire, set_aside = _made_clean(code, stop_seen, traces, pristine, job_start,
                                            memory_limit, job_directory)
        except BaseException:
            channel.send_held()  # the job's last message, before this process dies of it
            raise
        if retire is not None:
            told = protocol.Retired(reason=retire) if code == 0 and not stop_seen else None
            with contextlib.suppress(OSError):  # not its job's failure or stop: say why
                channel.send_held(told)
            break
        open_job_stdio()
        try:
            channel.send_held(protocol.Done())
        except OSError:
            return 0  # the supervisor is gone
    return code


def _made_clean(
    code: int,
    stop_seen: bool,
    traces: JobTraces,
    pristine: reuse.Pristine,
    job_start: ProcessState,
    memory_limit: int | None,
    job_directory: JobDirectory | None,
) -> tuple[str | None, JobDirectory | None]:
    """Make this process clean after a job (`sandbox.reuse`): why it cannot run another,
    if it cannot, and the job's directory set aside for the next, if it was left as made."""
    ended = traces.close()
    retire = reuse.retire_reason(
        exit_code=code,
        stop_seen=stop_seen,
        leftovers_gone=code == 0 and reuse.end_descendants(),
        extra_threads=threading.active_count() - pristine.threads,
        rss=reuse.resident_bytes() if memory_limit is not None else 0,
        memory_limit=memory_limit,
    )
    if retire is None and not ended:
        retire = "its control socket's reader did not end"
    if retire is None:
        retire = job_start.restore() or pristine.restore()
    if retire is not None or job_directory is None:
        return retire, None
    try:
        return None, end_job_directory(job_directory)
    except OSError as error:
        return f"its job's scratch directory could not be removed: {error}", None


def next_start(channel: ControlChannel) -> protocol.Start | None:
    """A reused child's next job's start, once it comes; None at the end of stream.
    Whatever comes before it was meant for the last job (a note it did not read, a stop
    that came late): dropped, never seen by the next job."""
    while True:
        try:
            message = channel.read_message()
        except ValueError:
            continue  # a line of the last job's that this side cannot read
        if message is None or isinstance(message, protocol.Start):
            return message


def _renew(settings: Confinement, cwd_fd: int) -> str | None:
    """Confine this process again for its next job; why it cannot run, if it cannot."""
    if settings.error is not None:
        return settings.error
    try:
        confinement.renew(settings, cwd_fd=cwd_fd)
    except ConfinementError as error:
        return str(error)
    return None


def _confine(settings: Confinement, server_pid: int) -> str | None:
    """Apply the handler's limits and isolation; why it cannot run, if it cannot."""
    if settings.error is not None:
        return settings.error
    try:
        confinement.apply(settings, server_pid=server_pid)
    except ConfinementError as error:
        return str(error)
    return None


def open_job_stdio() -> None:
    """`sys.stdout` and `sys.stderr` as a job has them. The fork server opens them once
    and its children inherit them; a reused child opens them again after a job.

    Line buffered, so that a job's log lines arrive as they are printed. Fds 1 and 2
    are only names here: they will be the job's output socket when it writes."""
    sys.stdout = open(  # noqa: SIM115
        1, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False
    )
    sys.stderr = open(  # noqa: SIM115
        2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False
    )


def main(
    channel: ControlChannel,
    handler_name: str,
    function: Callable[..., Any] | None,
    import_error: str | None,
    spec: HandlerSpec,
    *,
    setup_error: str | None = None,
    traces: JobTraces | None = None,
    scratch: str = "",
    start: protocol.Start | None = None,
) -> int:
    """Run one job; return the process exit code. With `traces`, note there what the
    job leaves in this process, for a child that runs another job after it. The job's
    `start` is read from `channel` unless given.

    0: a result or error message was sent; 1: the job could not run (no start message,
    the handler failed to import or could not be confined) or the supervisor is gone;
    143: stopped by SIGTERM.
    """
    if traces is not None:
        traces.channel = channel
    first = channel.read_message() if start is None else start
    if not isinstance(first, protocol.Start):
        print(f"poolsup: expected a start message, got {first!r}", file=sys.stderr)
        return 1
    start = first
    os.environ["POOLSUP_JOB_KEY"] = str(start.key)
    os.environ["POOLSUP_JOB_TOKEN"] = str(start.token)
    os.environ["POOLSUP_JOB_ATTEMPT"] = str(start.attempt)

    if setup_error is not None:
        return _report(channel, protocol.Error(error=f"handler cannot run: {setup_error}",
                                               final=True), code=1)

    inbox = Inbox(acknowledge=channel.acknowledge)
    job = Job(
        key=start.key,
        payload=start.payload,
        attempt=start.attempt,
        token=start.token,
        inbox=inbox,
        checkpoint=start.checkpoint,
        save_checkpoint=channel.save_checkpoint,
        scratch=scratch,
    )
    guard = StopGuard(job, inbox)
    wakeup_fd = guard.install()
    install_stack_reporter(channel)
    readers = traces.readers if traces is not None else []
    inbox.start_listening = lambda: readers.append(start_reader(channel, inbox, wakeup_fd))
    if traces is not None:
        traces.inbox, traces.guard = inbox, guard

    if function is None and import_error is None:
        try:
            function = load_handler(handler_name, spec)
        except BaseException:
            import_error = traceback.format_exc()
    if function is None:
        last_line = (import_error or "").strip().splitlines()[-1:] or ["unknown error"]
        return _report(channel, protocol.Error(
            error=f"handler file failed to import: {last_line[0]}",
            traceback=import_error,
            final=True,
        ), code=1)

    try:
        value = tracing.run_traced(start, channel, guard.run, function, job)
    except Stopped:
        return EXIT_STOPPED
    except Snooze as snooze:
        return _report(channel, protocol.Snooze(seconds=snooze.seconds))
    except EndSchedule:
        return _report(channel, protocol.EndSchedule())
    except BaseException as exc:
        return _report(channel, error_message(exc, function))
    try:
        data = orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError) as exc:
        return _report(channel, protocol.Error(error=f"result is not JSON-serializable: {exc}"))
    try:
        # Whether the handler returned in answer to a stop: after a drain or a move,
        # such a value does not end the job (it runs again elsewhere).
        channel.send_last(protocol.result_line(data, stopping=inbox.stop_seen))
    except OSError:
        return 1
    return 0


def error_message(exc: BaseException, function: Callable[..., Any]) -> protocol.Error:
    if isinstance(exc, SystemExit):
        error = f"handler called sys.exit({exc.code!r})"
    else:
        text = str(exc)
        error = type(exc).__name__ + (f": {text}" if text else "")
    tb = _from_handler(exc.__traceback__, function)
    return protocol.Error(
        error=error,
        traceback="".join(traceback.format_exception(type(exc), exc, tb)),
        final=isinstance(exc, Fail),
    )


def _from_handler(tb: TracebackType | None, function: Callable[..., Any]) -> TracebackType | None:
    """The traceback from the handler's first frame on, without the sandbox (and asyncio)
    frames above it; or, if the handler's file is not in it, without the sandbox's."""
    code = getattr(function, "__code__", None)
    entry = tb
    while entry is not None and code is not None:
        if entry.tb_frame.f_code.co_filename == code.co_filename:
            return entry
        entry = entry.tb_next
    while tb is not None and tb.tb_frame.f_code.co_filename in _SANDBOX_FILES:
        tb = tb.tb_next
    return tb


def _report(channel: ControlChannel, message: protocol.Message, code: int = 0) -> int:
    try:
        channel.send_last(protocol.encode_line(message))
    except OSError:
        return 1
    return code
