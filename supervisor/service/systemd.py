"""What systemd is told while the supervisor runs (sd_notify(3)): READY=1 once it
serves, a STATUS= line when it changes, WATCHDOG=1 while it is healthy, RELOADING=1
around a reload, STOPPING=1 and EXTEND_TIMEOUT_USEC= during a drain.

The decisions are in `core.watchdog` and `core.service_status`; this module reads the
clock, looks at the supervisor's parts and sends.  Without $NOTIFY_SOCKET it does
nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import anyio

from supervisor.core.service_status import DrainProgress, drain_extension, status_line
from supervisor.core.watchdog import TICK_TOLERANCE, next_watchdog_tick, reason_to_withhold_ping
from supervisor.forks.fork_client import ForkServerClient
from supervisor.job.running import Registry
from supervisor.observe.store_failures import StoreFailures
from supervisor.service.sd_notify import Notifier, ServiceEnvironment

log = logging.getLogger("poolsup.systemd")

STATUS_INTERVAL = 1.0  # STATUS= changes are sent at most this often


class ServiceReporter:
    def __init__(
        self,
        *,
        environment: ServiceEnvironment,
        registry: Registry,
        capacity: int,
        store_failures: Sequence[StoreFailures],
        fork_server: Callable[[], ForkServerClient | None],
        drain_budget: float,
    ) -> None:
        self._notifier = Notifier(environment.notify_socket)
        self._watchdog_interval = environment.watchdog_interval
        self._registry = registry
        self._capacity = capacity
        self._store_failures = store_failures
        self._fork_server = fork_server
        self._drain_budget = drain_budget
        self._drain: DrainProgress | None = None
        self._status_sent: str | None = None

    def ready(self) -> None:
        """Serving: registered in the store, a fork server ready (also after a reload)."""
        self._send("READY=1")

    def reloading(self) -> None:
        now_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self._notifier.send("RELOADING=1", f"MONOTONIC_USEC={now_usec}")

    def stopping(self) -> None:
        """A drain started."""
        self._drain = DrainProgress.start(jobs_left=len(self._registry), now=time.monotonic())
        self._send("STOPPING=1")

    async def run(self) -> None:
        """Until cancelled: keep STATUS= current, extend a drain's stop time while it
        earns it, and ping the watchdog if there is one."""
        if not self._notifier.active:
            return
        async with anyio.create_task_group() as group:
            group.start_soon(self._report_status)
            if self._watchdog_interval is not None:
                group.start_soon(self._ping_watchdog, self._watchdog_interval)

    def _status(self) -> str:
        return status_line(
            running=len(self._registry),
            capacity=self._capacity,
            store_failing=any(failures.failing for failures in self._store_failures),
            draining=self._drain is not None,
        )

    def _send(self, *fields: str) -> None:
        """`fields` and the current STATUS= line, in one message."""
        self._status_sent = self._status()
        self._notifier.send(*fields, f"STATUS={self._status_sent}")

    async def _report_status(self) -> None:
        while True:
            await anyio.sleep(STATUS_INTERVAL)
            if self._status() != self._status_sent:
                self._send()
            if self._drain is not None:
                now = time.monotonic()
                self._drain = self._drain.observe(jobs_left=len(self._registry), now=now)
                extension = drain_extension(self._drain, now=now, budget=self._drain_budget)
                if extension is not None:
                    self._notifier.send(f"EXTEND_TIMEOUT_USEC={int(extension * 1_000_000)}")

    async def _ping_watchdog(self, interval: float) -> None:
        due = time.monotonic() + interval
        while True:
            await anyio.sleep(max(0.0, due - time.monotonic()))
            woke_at = time.monotonic()
            server = self._fork_server()
            answered = server is not None and await server.ping(interval * TICK_TOLERANCE)
            reason = reason_to_withhold_ping(
                now=woke_at, due=due, interval=interval, fork_server_answered=answered
            )
            if reason is None:
                self._notifier.send("WATCHDOG=1")
            else:
                log.warning("watchdog not pinged: %s", reason)
            due = next_watchdog_tick(now=time.monotonic(), due=due, interval=interval)
