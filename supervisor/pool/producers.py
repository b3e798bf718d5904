"""A schedule's producer, run once in a sandboxed child like any handler, for its plan.

Each producer is loaded into the fork server as one more handler, named
`schedule:NAME`, so it is preloaded, confined and limited as handlers are.  Its
timeout is its fence: the fork server kills it when the timeout passes, whether or not
this event loop is alive.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import orjson

from sandbox import protocol
from supervisor.config import Config, HandlerConfig, ScheduleConfig
from supervisor.core.outcome import (
    Complete,
    Fail,
    Snooze,
    decide_outcome,
    producer_ends_schedule,
)
from supervisor.errors import PoolsupError
from supervisor.forks.fork_client import ForkServerClient
from supervisor.job.channel import ControlReader, SocketFeed
from supervisor.job.output import OutputPump
from supervisor.sandbox_config import protected_paths

log = logging.getLogger("poolsup.schedules")

PRODUCER_PREFIX = "schedule:"
RESULT_READ_GRACE = 2.0


class ProducerFailed(PoolsupError):
    """The producer raised, crashed, timed out or returned no plan."""


def producer_handler_name(schedule: str) -> str:
    return PRODUCER_PREFIX + schedule


def producer_handlers(schedules: Mapping[str, ScheduleConfig],
                      protected: tuple[Path, ...]) -> dict[str, HandlerConfig]:
    """The producers as handlers, for the fork server's table, in the default sandbox
    with the pool's `protected` files (config, SQLite store) hidden as from any job."""
    handlers = {}
    for schedule in schedules.values():
        if schedule.producer_path is None or schedule.producer_function is None:
            continue
        name = producer_handler_name(schedule.name)
        handlers[name] = HandlerConfig(
            name=name,
            path=schedule.producer_path,
            function=schedule.producer_function,
            timeout=schedule.timeout,
            max_attempts=1,
            rebalance=False,
            protected=protected,
        )
    return handlers


def sandboxed_code(config: Config) -> dict[str, HandlerConfig]:
    """Everything a fork server preloads: the handlers and the producers."""
    protected = protected_paths(config.path, config.pool.store)
    return {**config.handlers, **producer_handlers(config.schedules, protected)}


async def run_producer(
    fork_server: ForkServerClient, schedule: ScheduleConfig, *, tick: float, max_result: int
) -> Any:
    """The producer's return value (decoded JSON); raises `ProducerFailed`."""
    key = producer_handler_name(schedule.name)
    start = protocol.Start(key=key, payload=schedule.payload, token=int(tick), attempt=1)
    job_id = f"{key}@{tick!r}"
    child = await fork_server.spawn(
        job_id, key, protocol.fence_clock() + schedule.timeout,
        first_message=protocol.encode_line(start),
    )
    # Read as a job's child is read (`job.channel`): by event-loop callbacks.
    reader = ControlReader(max_result=max_result)
    output = OutputPump(key)
    control = SocketFeed(child.control_socket, reader.feed)
    output_feed = SocketFeed(child.output_socket, output.feed)
    try:
        await child.exited.wait()
        await control.drained(RESULT_READ_GRACE)
    finally:
        control.close()
        output_feed.close()
        output.flush()
        if not child.exited.is_set():
            with anyio.CancelScope(shield=True):
                await fork_server.kill(job_id)
        child.close()
    status = child.status
    ended = reader.exit_report(status)
    if producer_ends_schedule(ended):
        return {"end_schedule": True}  # sandbox.EndSchedule: the plan that ends it
    outcome = decide_outcome(ended, None, timeout=schedule.timeout,
                             signal_name=status.signal_name if status else None)
    match outcome:
        case Complete(result_json):
            return orjson.loads(result_json)
        case Fail(error):
            # Its first line: it is shown in one line (the tick's outcome in `schedules`,
            # the log, `plan`); the child's output has the rest.
            first = error.strip().splitlines()[0] if error.strip() else "no error message"
            raise ProducerFailed(f"producer failed: {first}")
        case Snooze():
            raise ProducerFailed("producer failed: it raised sandbox.Snooze, which only a "
                                 "job's handler may; a producer returns a plan")
    raise ProducerFailed(f"producer timed out after {schedule.timeout:g} s")
