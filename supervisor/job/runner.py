"""Run claimed jobs: fence each, admit it among the runs held here, and run it in the
task of a job that ended, if one waits for its next, else in a task of its own
(`JobStarter`); one job's way (`run_job`): start it in a child, feed it, stop it, store
its outcome.  A job whose handler is gone goes back."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import signal
from collections.abc import Callable, Coroutine, Mapping
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import orjson

from sandbox import protocol
from supervisor.config import HandlerConfig
from supervisor.core.admission import Admission
from supervisor.core.blame import outcome_after_death
from supervisor.core.leases import fence_deadline
from supervisor.core.outcome import (
    Abandon,
    ChildExit,
    Fail,
    Outcome,
    Release,
    Stopped,
    StopReason,
    decide_outcome,
)
from supervisor.doorbell import Doorbell, Latch
from supervisor.errors import PoolsupError, StaleToken, StoreFailure
from supervisor.forks.child import Child
from supervisor.forks.fork_client import ForkServerDied
from supervisor.forks.fork_servers import ForkServers
from supervisor.job.channel import ControlReader, ControlWriter, SocketFeed
from supervisor.job.kept_output import OutputKeeper
from supervisor.job.output import OutputPump
from supervisor.job.running import Registry, RunningJob
from supervisor.job.settle import Settler
from supervisor.job.under_lease import CheckpointKeeper, NoteCourier
from supervisor.observe.job_log import JobLog
from supervisor.observe.metrics import metrics
from supervisor.observe.store_failures import StoreFailures
from supervisor.store.base import Store
from supervisor.store.records import ClaimedJob

log = logging.getLogger("poolsup")

if TYPE_CHECKING:
    from supervisor.observe.otel import AttemptSpan, Tracing

RESULT_READ_GRACE = 2.0
FLUSH_TIMEOUT = 1.0  # for checkpoints and note acks still in flight at the end
# A job whose child could not be started waits this long before it may be claimed
# again (here or elsewhere), so that a failing spawn cannot loop claim-release-claim.
SPAWN_RETRY_DELAY = 1.0
RUNNER_IDLE = 1.0  # how long the task of a job that ended waits to run the next one


@dataclass(frozen=True, kw_only=True)
class JobSettings:
    stop_grace: float
    max_result: int
    max_checkpoint: int
    max_log: int  # bytes of each run's output kept in the store; 0: none


@dataclass(kw_only=True)
class JobServices:
    """What every job's supervision shares: the store, the registry, and one failure
    log per kind of store write, so that an outage is logged once, not once a job."""

    store: Store
    registry: Registry
    settings: JobSettings
    outcome_failures: StoreFailures
    settler: Settler
    note_failures: StoreFailures
    output_failures: StoreFailures
    child_started: Callable[[], None]  # so that the store soon shows its pid
    tracing: Tracing | None = None  # None unless OTEL_* variables ask (observe/tracing.py)


class JobStarter:
    """Claimed jobs into running ones, each in a task of its own."""

    def __init__(
        self,
        *,
        group: anyio.abc.TaskGroup,
        services: JobServices,
        fork_servers: ForkServers,
        handlers: Mapping[str, HandlerConfig],
        lease_ttl: float,
        draining: anyio.Event,
    ) -> None:
        self._group = group
        self._services = services
        self._fork_servers = fork_servers
        self.handlers = handlers  # replaced by a reload
        self._lease_ttl = lease_ttl
        self._draining = draining
        self.outcomes_left_to_recovery = 0  # during the drain
        # Tasks waiting for a job, and since when: the longest waiting first.
        self._idle: list[tuple[asyncio.Future[RunningJob | None], float]] = []
        self._sweep: asyncio.TimerHandle | None = None  # ends the tasks idle too long
        self._stopped = False

    def start(self, claimed: ClaimedJob, claim_sent_at: float) -> None:
        handler = self.handlers.get(claimed.handler)
        if handler is None:  # claimed just before a reload removed its handler
            self._group.start_soon(self._hand_back, claimed, name=f"release {claimed.key}")
            return
        job = RunningJob(
            claimed=claimed,
            handler=handler,
            fork_server=self._fork_servers.current,
            fence_at=fence_deadline(claim_sent_at, self._lease_ttl),
        )
        admission = self._services.registry.add(job)
        if admission is Admission.DUPLICATE:
            return  # already running here: starting it again must be a no-op
        if admission is Admission.STALE:
            JobLog(log, job.key, job.token).warning("ignored an outdated claim")
            return
        self._hand_over(job)

    def _hand_over(self, job: RunningJob) -> None:
        """Run `job` in the task of a job that ended, if one waits for the next, else in
        a task of its own (starting one costs some sixty calls)."""
        while self._idle:
            waiter, _ = self._idle.pop()  # the last to end: the older ones may age out
            if not waiter.done():  # else cancelled meanwhile
                waiter.set_result(job)
                return
        self._group.start_soon(self._runs, job, name="job")

    async def _runs(self, job: RunningJob | None) -> None:
        """Jobs one after another in this task, each as if in a task of its own; the
        task ends once it waited RUNNER_IDLE seconds or more for the next."""
        while job is not None:
            await self._run(job)
            job = await self._next_job()

    def stop(self) -> None:
        """No more jobs come (the drain): the tasks waiting for one end now, so that the
        jobs' task group ends with the last job."""
        self._stopped = True
        self._end_idle(math.inf)

    async def _next_job(self) -> RunningJob | None:
        if self._stopped:
            return None
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[RunningJob | None] = loop.create_future()
        self._idle.append((waiter, loop.time()))
        if self._sweep is None:  # one timer for every task waiting, not one per wait
            self._sweep = loop.call_later(RUNNER_IDLE, self._swept)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and (job := waiter.result()):
                self._services.registry.remove(job)  # handed over as the task was cancelled
            raise

    def _swept(self) -> None:
        self._sweep = None
        self._end_idle(asyncio.get_running_loop().time() - RUNNER_IDLE)
        if self._idle:
            self._sweep = asyncio.get_running_loop().call_later(RUNNER_IDLE, self._swept)

    def _end_idle(self, since: float) -> None:
        """End the tasks that have waited for a job since `since` or earlier."""
        ended = 0
        for waiter, idle_since in self._idle:
            if idle_since > since:
                break
            ended += 1
            if not waiter.done():
                waiter.set_result(None)
        del self._idle[:ended]

    async def _hand_back(self, claimed: ClaimedJob) -> None:
        job_log = JobLog(log, claimed.key, claimed.token)
        job_log.warning("handler %r is no longer configured here; released", claimed.handler)
        try:
            await self._services.store.release(
                claimed.lease, delay=SPAWN_RETRY_DELAY,
                reason=f"handler {claimed.handler!r} is not configured here")
        except (StoreFailure, StaleToken) as error:
            job_log.warning("could not release: %s", error)

    async def _run(self, job: RunningJob) -> None:
        try:
            stored = await run_job(job, self._services)
            if not stored and self._draining.is_set():
                self.outcomes_left_to_recovery += 1
        except Exception:
            # A bug here must cost one job, not the supervisor: kill its child and
            # let the lease expire, so the store's recovery runs it again.
            job_log = JobLog(log, job.key, job.token)
            job_log.exception("supervising the job failed")
            with anyio.CancelScope(shield=True):
                try:
                    await job.fork_server.kill(job.job_id)
                except Exception:
                    job_log.exception("could not kill its child")
        finally:
            self._services.registry.remove(job)


async def run_job(job: RunningJob, services: JobServices) -> bool:
    """Everything between a claim and the stored outcome of one attempt, in a child
    of the job's fork server.  False if the outcome was left to the store's recovery
    because the store kept failing past the job's fence.  A tracing supervisor makes
    the attempt a span (docs/tracing.md)."""
    span = None if services.tracing is None else _attempt_span(job, services.tracing)
    try:
        return await _run_attempt(job, services, span)
    finally:
        if span is not None:
            span.end(None)  # after a bug in supervising it; ended with its outcome before


def _attempt_span(job: RunningJob, tracing: Tracing) -> AttemptSpan:
    claimed = job.claimed
    return tracing.attempt(key=claimed.key, handler=claimed.handler, attempt=claimed.attempt,
                           token=claimed.token, traceparent=claimed.traceparent,
                           tracestate=claimed.tracestate)


async def _settle(job: RunningJob, outcome: Outcome, services: JobServices,
                  span: AttemptSpan | None) -> bool:
    if span is not None:
        span.end(outcome, job.stop_reason, job.move.target if job.move else None)
    return await services.settler.settle(job, outcome)


async def _run_attempt(job: RunningJob, services: JobServices, span: AttemptSpan | None
                       ) -> bool:
    for older in services.registry.older_runs(job):
        # The store handed the key out again: the older run's lease is gone, and its
        # processes must be gone before this run starts one.
        older.request_stop(StopReason.LEASE_LOST)
        await older.gone.wait()
    if job.lease_lost:
        return await _settle(job, Abandon("lease lost before the job started"), services, span)
    claimed = job.claimed
    start = protocol.Start(
        key=job.key,
        payload=orjson.Fragment(claimed.payload),
        token=claimed.token,
        attempt=claimed.attempt,
        checkpoint=None if claimed.checkpoint is None else orjson.Fragment(claimed.checkpoint),
        trace=None if span is None else span.child_context(),
    )
    try:
        # Not waiting for the fork server's report: a child it could not start exits at
        # once, and the job's one wait below sees that too.
        child = await job.fork_server.start(
            job.job_id, claimed.handler, job.fence_at, first_message=protocol.encode_line(start),
            key=job.key, wake=job.wake,
        )
    except PoolsupError as error:  # nothing of the job ran
        return await _not_started(job, error, services, span)
    job.attach(child)
    services.child_started()
    job.log.debug("started %s attempt %d", claimed.handler, claimed.attempt)
    exit_report, details = await _supervise(job, child, services, span)
    if child.never_started:
        return await _not_started(job, PoolsupError(f"could not start a child: "
                                                    f"{child.spawn_error}"), services, span)
    if child.pid is None:
        job.log.warning("started %s attempt %d; its fork server died before reporting the "
                        "child", claimed.handler, claimed.attempt)
    if exit_report.fenced:
        metrics.fenced_kills.inc()
    status = child.status
    outcome = decide_outcome(
        exit_report,
        job.stop_reason,
        timeout=job.handler.timeout,
        signal_name=status.signal_name if status else None,
    )
    if status is not None and status.fork_server_died and status.verdict is not None:
        outcome = outcome_after_death(outcome, status.verdict, status.fork_server_died)
    outcome = _explained(outcome, details, killed_after_grace=job.killed_after_grace)
    return await _settle(job, outcome, services, span)


async def _not_started(job: RunningJob, error: PoolsupError, services: JobServices,
                       span: AttemptSpan | None) -> bool:
    job.log.error("%s", error)
    release = Release(f"could not start: {error}", delay=SPAWN_RETRY_DELAY)
    return await _settle(job, release, services, span)


def _explained(outcome: Outcome, details: str, *, killed_after_grace: bool) -> Outcome:
    """The error a user reads: the reason on the first line, then what helps act on it."""
    suffix = "; did not stop within stop_grace, killed" if killed_after_grace else ""
    match outcome:
        case Fail(error):
            text = error + suffix
            return dataclasses.replace(outcome, error=f"{text}\n\n{details}" if details else text)
        case Stopped(why):
            return Stopped(why + suffix)
    return outcome


async def _supervise(job: RunningJob, child: Child, services: JobServices,
                     span: AttemptSpan | None) -> tuple[ChildExit, str]:
    """Watch the child until it has exited; its exit, and details for an error record.

    This is the job's one task: its sockets are read by event-loop callbacks
    (`SocketFeed`), its timeout is a timer, and it waits on the job's `wake` for a stop
    or a note; the stop, the notes and the checkpoints start a task of their own only
    while one is under way, in a task group made for a job that starts one."""

    output = OutputPump(job.key, token=job.token)
    timeout = job.handler.timeout
    timer = (asyncio.get_running_loop().call_later(timeout, job.request_stop,
                                                   StopReason.TIMEOUT)
             if timeout > 0 else None)
    tasks = _Tasks(job.wake)
    # The one writer of the child's control socket: notes and the stop.
    writer = ControlWriter(child.control, start=tasks.start)
    # Notes and checkpoints start tasks of their own when the first comes.
    courier = NoteCourier(job, services.store, writer.send, services.note_failures,
                          start=tasks.start)
    checkpoints = CheckpointKeeper(job, services.store, services.outcome_failures,
                                   max_bytes=services.settings.max_checkpoint,
                                   start=tasks.start)

    def done() -> None:  # a reused child's job is over: nothing more of it on the socket
        child.reported_done()
        control.close()

    reader = ControlReader(max_result=services.settings.max_result,
                           on_ack=courier.acknowledged, on_checkpoint=checkpoints.offer,
                           on_stacks=job.stack_requests.answered,
                           on_spans=None if span is None else span.take_child_spans,
                           on_done=done)
    # Its end matters once the child exited (a reused child's often comes first).
    control = SocketFeed(child.control_socket, reader.feed,
                         ended=partial(_ring_if, child.exited, job.wake))
    kept = None
    if services.settings.max_log > 0:
        kept = OutputKeeper(job, services.store, services.output_failures,
                            max_bytes=services.settings.max_log, start=tasks.start)
    output_feed = SocketFeed(child.output_socket, output.feed if kept is None
                             else _both(output.feed, kept.feed))
    watch = _Watch(job, child, control, tasks, courier,
                   stop=partial(_stop, job, child, writer, services.settings.stop_grace),
                   ask_stacks=partial(writer.send, protocol.ThreadStacks()))
    try:
        await watch.until_drained()
        if tasks.wanted:  # most jobs start none: no task group to make and cancel
            async with anyio.create_task_group() as group:
                tasks.run_in(group)
                await watch.until_drained()
                group.cancel_scope.cancel()
    finally:
        if timer is not None:
            timer.cancel()
        watch.close()
        control.close()
        if child.done:
            output_feed.read_rest()  # written before "done": none left for the next job
        output_feed.close()
        if kept is not None:
            kept.close()
    output.flush()
    if kept is not None:
        await kept.finish()  # before the outcome, so that `logs` after the end is whole
    if child.done and not child.spawned.is_set():
        # A fresh child's first job can be over before the fork server's report of the
        # child (its pid) is read: without it the child could not be kept.
        await child.spawned.wait()
    job.fork_server.done_with(child, reusable=not writer.cut)
    if reader.retired is not None:
        job.log.info("its child (pid %s) is not reused: %s", child.pid, reader.retired)
    if not job.lease_lost and (checkpoints.unwritten or courier.unwritten):
        with anyio.move_on_after(FLUSH_TIMEOUT):
            await checkpoints.flush()
            await courier.flush()
    status = child.status
    exit_report = reader.exit_report(status)
    details = [reader.traceback.rstrip()]
    if tail := output.tail().rstrip():
        details.append("last output:\n" + tail)
    return exit_report, "\n\n".join(part for part in details if part)


def _ring_if(latch: Latch, doorbell: Doorbell) -> None:
    if latch.is_set():
        doorbell.ring()


class _Watch:
    """The job's wait: for a stop or a note while its child runs, then for its control
    socket to drain (the child wrote its result before exiting), even if a grandchild
    still holds it open (then it gives up after RESULT_READ_GRACE): one wait on the job's
    `wake`, which the child's exit, the socket's end, a stop and a note ring."""

    def __init__(self, job: RunningJob, child: Child, control: SocketFeed, tasks: _Tasks,
                 courier: NoteCourier, stop: Callable[[], Coroutine[Any, Any, None]],
                 ask_stacks: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._job = job
        self._child = child
        self._control = control
        self._tasks = tasks
        self._courier = courier
        self._stop: Callable[[], Coroutine[Any, Any, None]] | None = stop
        self._ask_stacks = ask_stacks  # a shared child's job's: on its channel
        self._grace: asyncio.TimerHandle | None = None

    async def until_drained(self) -> None:
        """Until the child exited and its control socket drained, or until a task is
        wanted and the job has no task group yet (`_Tasks.wanted`)."""
        job, child, control = self._job, self._child, self._control
        while True:
            if not child.exited.is_set():
                if self._stop is not None and job.stop_wanted.is_set():
                    stop, self._stop = self._stop, None
                    self._tasks.start(stop)
                self._courier.check()
                if job.stack_requests.take_channel_request():
                    self._tasks.start(self._ask_stacks)
            elif control.closed.is_set() or child.never_started:
                return
            elif self._grace is None:
                self._grace = asyncio.get_running_loop().call_later(RESULT_READ_GRACE,
                                                                    control.close)
            if self._tasks.wanted:
                return
            await job.wake.wait()

    def close(self) -> None:
        if self._grace is not None:
            self._grace.cancel()


class _Tasks:
    """The job's tasks, as its pieces start them: kept until the job has a task group
    (`run_in`), which a job that starts none never makes.  Whether any was started."""

    def __init__(self, wake: Doorbell) -> None:
        self._wake = wake  # rung when a task is wanted, so that the job makes its group
        self._group: anyio.abc.TaskGroup | None = None
        self._wanted: list[Callable[[], Coroutine[Any, Any, None]]] = []

    @property
    def wanted(self) -> bool:
        return bool(self._wanted)

    def start(self, task: Callable[[], Coroutine[Any, Any, None]]) -> None:
        if self._group is None:
            self._wanted.append(task)
            self._wake.ring()
        else:
            self._group.start_soon(task)

    def run_in(self, group: anyio.abc.TaskGroup) -> None:
        self._group = group
        wanted, self._wanted = self._wanted, []
        for task in wanted:
            group.start_soon(task)


def _both(first: Callable[[bytes], None], second: Callable[[bytes], None]
          ) -> Callable[[bytes], None]:
    def feed(data: bytes) -> None:
        first(data)
        second(data)
    return feed


async def _stop_task(job: RunningJob, child: Child, writer: ControlWriter,
                     stop_grace: float) -> None:
    """The stop of a job of a shared child: its child cancels the job's task when the
    stop's reason reaches it; no signal, which would reach every job of the child. A
    lost lease is left to the fork server, which kills the whole child at the job's
    fence if the task has not ended by then (guarantee 14); any other stop kills it
    after the grace, its other jobs released."""
    reason = job.stop_reason.value if job.stop_reason else StopReason.USER.value
    await writer.stop(reason).wait()
    if job.lease_lost:
        return
    with anyio.move_on_after(stop_grace) as grace:
        await job.lease_lost_event.wait()
    if grace.cancelled_caught:
        job.log.info("did not stop within stop_grace (%g s), killing its shared child "
                     "(pid %s)", stop_grace, child.pid)
        job.killed_at_grace_end()
        with suppress(ForkServerDied):
            await job.fork_server.kill(child.job_id)


async def _stop(job: RunningJob, child: Child, writer: ControlWriter, stop_grace: float) -> None:
    """Graceful stop, asked for or at the handler's `timeout`: tell the handler
    (without waiting behind a note it does not read), SIGTERM the group, SIGKILL after
    the grace.
    A lost lease skips the grace: someone else may be starting the job already.
    A fork server that died took the child with it: nothing is left to signal."""
    fork_server = job.fork_server
    if job.handler.child_concurrency > 1:
        await _stop_task(job, child, writer, stop_grace)
        return
    with suppress(ForkServerDied):
        if job.lease_lost:
            await fork_server.kill(child.job_id)
            return
        reason = job.stop_reason.value if job.stop_reason else StopReason.USER.value
        # The reason reaches the handler before its SIGTERM unless a note it does not
        # read holds the socket; then SIGTERM goes first, a moment later.
        with anyio.move_on_after(protocol.STOP_REASON_WAIT):
            await writer.stop(reason).wait()
        await fork_server.signal(child.job_id, signal.SIGTERM)
        with anyio.move_on_after(stop_grace) as grace:
            await job.lease_lost_event.wait()
        if grace.cancelled_caught:
            job.log.info("did not stop within stop_grace (%g s), killing", stop_grace)
            job.killed_at_grace_end()
        await fork_server.kill(child.job_id)
