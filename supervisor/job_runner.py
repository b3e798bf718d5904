"""Run one claimed job in a child: start it, feed it, stop it, store its outcome."""

from __future__ import annotations

import logging
import random
import signal
from contextlib import suppress
from dataclasses import dataclass

import anyio
import orjson

from sandbox import protocol
from supervisor.children import Child
from supervisor.core.leases import fence_deadline
from supervisor.core.outcome import (
    Abandon,
    ChildExit,
    Complete,
    Fail,
    Outcome,
    Release,
    Stopped,
    StopReason,
    decide_outcome,
)
from supervisor.core.retry import backoff_delay
from supervisor.errors import PoolsupError, StaleToken, StoreUnavailable
from supervisor.output import OutputPump
from supervisor.running import Registry, RunningJob
from supervisor.store.base import Store

log = logging.getLogger("poolsup.jobs")

MAX_TRACEBACK = 8192
RESULT_READ_GRACE = 2.0
FINALIZE_RETRY_MAX = 2.0


@dataclass(frozen=True, kw_only=True)
class JobSettings:
    lease_ttl: float
    stop_grace: float


async def run_job(
    job: RunningJob,
    *,
    store: Store,
    settings: JobSettings,
    registry: Registry,
    claim_sent_at: float,
) -> None:
    """Everything between a claim and the stored outcome of one attempt, in a child
    of the job's fork server."""
    claimed = job.claimed
    start = {
        "t": protocol.MSG_START,
        "key": job.key,
        "payload": orjson.Fragment(claimed.payload),
        "token": claimed.token,
        "attempt": claimed.attempt,
    }
    try:
        child = await job.fork_server.spawn(
            job.job_id,
            claimed.handler,
            fence_deadline(claim_sent_at, settings.lease_ttl),
            first_message=protocol.encode_line(start),
        )
    except PoolsupError as error:
        log.error("[%s] %s", claimed.key, error)
        await _finalize(job, Release(str(error)), store=store, registry=registry)
        return
    job.child = child
    job.stats()  # the first sample, so the first renewal can report CPU use
    log.info(
        "[%s] started %s attempt %d token %d pid %s",
        claimed.key,
        claimed.handler,
        claimed.attempt,
        claimed.token,
        child.pid,
    )
    exit_report, details = await _supervise(job, child, store=store, settings=settings)
    status = child.status
    outcome = decide_outcome(
        exit_report,
        job.stop_reason,
        timeout=job.handler.timeout,
        signal_name=status.signal_name if status else None,
    )
    outcome = _explained(outcome, details, killed_after_grace=job.killed_after_grace)
    await _finalize(job, outcome, store=store, registry=registry)


def _explained(outcome: Outcome, details: str, *, killed_after_grace: bool) -> Outcome:
    """The error a user reads: the reason on the first line, then what helps act on it."""
    suffix = "; did not stop within stop_grace, killed" if killed_after_grace else ""
    match outcome:
        case Fail(error, final):
            text = error + suffix
            return Fail(f"{text}\n\n{details}" if details else text, final)
        case Stopped(why):
            return Stopped(why + suffix)
    return outcome


class ControlReader:
    """Reads the child's messages; keeps the last one and the raw JSON of a result."""

    def __init__(self, child: Child) -> None:
        self._child = child
        self.last_message: dict[str, object] | None = None
        self.result_json: bytes | None = None
        self.traceback = ""
        self.closed = anyio.Event()

    async def run(self) -> None:
        buffer = b""
        try:
            while True:
                buffer += await self._child.control.receive()
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line:
                        self._take(line)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            self.closed.set()

    def _take(self, line: bytes) -> None:
        message = protocol.decode(line)
        self.last_message = message
        if message.get("t") == protocol.MSG_RESULT:
            self.result_json = orjson.dumps(message.get("value"))
        elif message.get("t") == protocol.MSG_ERROR:
            self.traceback = str(message.get("traceback") or "")[-MAX_TRACEBACK:]


async def _supervise(
    job: RunningJob,
    child: Child,
    *,
    store: Store,
    settings: JobSettings,
) -> tuple[ChildExit, str]:
    """Watch the child until it has exited; its exit, and details for an error record."""
    reader = ControlReader(child)
    output = OutputPump(job.key, child.output)
    async with anyio.create_task_group() as group:
        group.start_soon(reader.run)
        group.start_soon(output.run)
        group.start_soon(_watch_stop, job, child, settings.stop_grace)
        group.start_soon(_deliver_notifications, job, child, store)
        if job.handler.timeout > 0:
            group.start_soon(_watch_timeout, job, job.handler.timeout)
        await child.exited.wait()
        # The child wrote its result before exiting; let the socket drain, even if a
        # grandchild still holds it open (then give up after the grace).
        with anyio.move_on_after(RESULT_READ_GRACE):
            await reader.closed.wait()
        group.cancel_scope.cancel()
    output.flush()
    await child.control.aclose()
    await child.output.aclose()
    status = child.status
    exit_report = ChildExit(
        message=reader.last_message,
        result_json=reader.result_json,
        exit_code=status.code if status else None,
        exit_signal=status.signal if status else None,
        fenced=status.fenced if status else False,
        reason=status.reason if status else None,
    )
    details = [reader.traceback.rstrip()]
    if tail := output.tail().rstrip():
        details.append("last output:\n" + tail)
    return exit_report, "\n\n".join(part for part in details if part)


async def _send(child: Child, message: dict[str, object]) -> None:
    # A child that is gone cannot be told anything; its exit tells the rest.
    with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await child.control.send(protocol.encode_line(message))


async def _watch_timeout(job: RunningJob, timeout: float) -> None:
    await anyio.sleep(timeout)
    job.request_stop(StopReason.TIMEOUT)


async def _watch_stop(job: RunningJob, child: Child, stop_grace: float) -> None:
    """Graceful stop: tell the handler, SIGTERM the group, SIGKILL after the grace.
    A lost lease skips the grace: someone else may be starting the job already."""
    fork_server = job.fork_server
    await job.stop_wanted.wait()
    if job.lease_lost:
        await fork_server.kill(child.job_id)
        return
    await _send(child, {"t": protocol.MSG_STOP})
    await fork_server.signal(child.job_id, signal.SIGTERM)
    with anyio.move_on_after(stop_grace) as grace:
        while not job.lease_lost:
            job.stop_wanted = anyio.Event()
            await job.stop_wanted.wait()
    if grace.cancelled_caught:
        log.info("[%s] did not stop within stop_grace (%g s), killing", job.key, stop_grace)
        job.killed_after_grace = True
    await fork_server.kill(child.job_id)


async def _deliver_notifications(job: RunningJob, child: Child, store: Store) -> None:
    if job.claimed.has_notes:
        job.notes_waiting.set()  # notes sent while it was pending
    while True:
        await job.notes_waiting.wait()
        job.notes_waiting = anyio.Event()
        try:
            notes = await store.take_notifications(job.lease)
        except StoreUnavailable:
            await anyio.sleep(1.0)
            job.notes_waiting.set()
            continue
        for note in notes:
            await _send(child, {"t": protocol.MSG_NOTIFY, "payload": orjson.Fragment(note)})


async def _finalize(
    job: RunningJob, outcome: Outcome, *, store: Store, registry: Registry
) -> None:
    """Store the outcome, retrying while the store is unreachable and the lease held."""
    registry.mark_finalizing(job)
    delay = 0.1
    while True:
        if job.lease_lost and not isinstance(outcome, Abandon):
            outcome = Abandon("lease lost before the outcome was stored")
        try:
            await _store_outcome(job, outcome, store)
            return
        except StaleToken:
            log.warning(
                "[%s] lease lost; outcome not stored (token %d)", job.key, job.claimed.token
            )
            return
        except StoreUnavailable as error:
            log.warning("[%s] cannot store outcome yet: %s", job.key, error)
            await anyio.sleep(delay)
            delay = min(FINALIZE_RETRY_MAX, delay * 2)


async def _store_outcome(job: RunningJob, outcome: Outcome, store: Store) -> None:
    lease = job.lease
    match outcome:
        case Complete(result_json):
            await store.complete(lease, result_json)
            log.info("[%s] succeeded", job.key)
        case Fail(error, final):
            delay = backoff_delay(job.claimed.attempt, random.random())
            final = final or job.claimed.attempt >= job.max_attempts
            state = await store.fail(lease, error, final=final, retry_delay=delay)
            if state == "pending":
                log.info(
                    "[%s] attempt %d failed, retry in %.1f s: %s",
                    job.key,
                    job.claimed.attempt,
                    delay,
                    error,
                )
            else:
                log.info("[%s] %s: %s", job.key, state, error)
        case Release(why):
            await store.release(lease)
            log.info("[%s] released: %s", job.key, why)
        case Stopped(why):
            await store.finish_stopped(lease, why)
            log.info("[%s] stopped", job.key)
        case Abandon(why):
            log.warning("[%s] abandoned: %s", job.key, why)
