"""A registered supervisor at work: its fork servers, claims, jobs and background loops,
from the first claim to the end of the drain, and what a reload changes."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass

import anyio
import anyio.abc

from supervisor.config import Config, HandlerConfig, load_config
from supervisor.core.limits import Limits
from supervisor.core.outcome import StopReason
from supervisor.doorbell import Doorbell
from supervisor.errors import ConfigError, StoreFailure
from supervisor.forks.fork_servers import ForkServers, sandbox_notes
from supervisor.forks.replacement import replace_dead_fork_servers
from supervisor.job.claimer import Claimer
from supervisor.job.lease_keeper import LeaseKeeper
from supervisor.job.results import PendingResults
from supervisor.job.runner import JobServices, JobStarter
from supervisor.observe.health import health
from supervisor.observe.metrics import metrics
from supervisor.observe.store_failures import StoreFailures
from supervisor.pool.membership import Membership
from supervisor.pool.producers import sandboxed_code
from supervisor.pool.rebalancer import Rebalancer
from supervisor.pool.scheduler import Scheduler
from supervisor.service.debugging import answer_debug
from supervisor.service.health import check_in
from supervisor.service.loops import supervised
from supervisor.service.sd_notify import ServiceEnvironment
from supervisor.service.systemd import ServiceReporter
from supervisor.store.records import PAUSE_ALL

log = logging.getLogger("poolsup")

JOB_COUNT_INTERVAL = 5.0


@dataclass(frozen=True, kw_only=True)
class Lifetime:
    """What a supervisor process keeps from start to exit, which serving uses."""

    membership: Membership
    keeper: LeaseKeeper
    services: JobServices
    claims_wanted: Doorbell  # rung by freed slots, results and store events
    results: PendingResults  # for the next claim to store
    claim_failures: StoreFailures
    environment: ServiceEnvironment
    shutdown: anyio.Event  # a drain was asked for
    hurry: anyio.Event  # stop running jobs now
    give_up: Callable[[], None]  # exit 1 after the drain


class Serving:
    def __init__(self, config: Config, life: Lifetime, fork_servers: ForkServers,
                 jobs_group: anyio.abc.TaskGroup, background: anyio.abc.TaskGroup) -> None:
        self.config = config
        self._life = life
        self._store = life.services.store
        self._registry = life.services.registry
        self.fork_servers = fork_servers
        self._background = background
        settings = config.supervisor
        self.starter = JobStarter(group=jobs_group, services=life.services,
                                  fork_servers=fork_servers, handlers=config.handlers,
                                  lease_ttl=settings.lease_ttl, draining=life.shutdown)
        self.claimer = Claimer(
            store=self._store, registry=self._registry, owner=settings.id,
            handlers=list(config.handlers), limits=handler_limits(config.handlers),
            capacity=settings.capacity,
            lease_ttl=settings.lease_ttl, start_job=self.starter.start,
            spawn_ready=fork_servers.ready, spawn_possible=lambda: fork_servers.spawn_possible,
            wakeup=life.claims_wanted, failures=life.claim_failures, results=life.results,
        )
        self.rebalancer = Rebalancer(store=self._store, registry=self._registry,
                                     owner=settings.id, lease_ttl=settings.lease_ttl)
        self.scheduler = Scheduler(
            store=self._store, owner=settings.id, schedules=config.schedules,
            handlers=config.handlers, fork_server=lambda: fork_servers.current,
            max_payload=config.pool.max_payload, max_result=config.pool.max_result,
        )
        self.service = ServiceReporter(
            environment=life.environment, registry=self._registry, capacity=settings.capacity,
            store_failures=(life.keeper.failures, life.claim_failures,
                            life.membership.failures, life.services.settler.failures),
            fork_server=lambda: fork_servers.current,
            drain_budget=settings.drain_timeout + settings.stop_grace + settings.lease_ttl,
        )

    def start(self, lease_keeper_died: Callable[[], None]) -> None:
        """Start the background loops; READY=1."""
        self.service.ready()
        loops = {
            "service reporter": self.service.run,
            "membership": self._life.membership.run,
            "claimer": self.claimer.run,
            "rebalancer": self.rebalancer.run,
            "scheduler": self.scheduler.run,
            "event listener": self._listen,
            "fork server replacement": self._replace_fork_servers,
        }
        if metrics.on:
            loops["job counts"] = self._count_jobs
            loops["health check-in"] = lambda: check_in(lambda: self.fork_servers.current)
            health.store_failing = lambda: any(
                failures.failing for failures in (self._life.keeper.failures,
                                                  self._life.claim_failures))
            health.serving = True
        self._background.start_soon(supervised, "lease keeper", self._life.keeper.run,
                                    lease_keeper_died, name="lease keeper")
        for name, loop in loops.items():
            self._background.start_soon(supervised, name, loop, name=name)

    async def drain(self) -> None:
        health.draining = True
        self.service.stopping()
        self.claimer.stop()
        self.starter.stop()
        self.rebalancer.stop()
        self.scheduler.stop()
        self._life.membership.update("mark this supervisor draining", state="draining")
        drain_timeout = self.config.supervisor.drain_timeout
        if len(self._registry):
            log.info("draining %d job(s), up to %g s", len(self._registry), drain_timeout)
        with anyio.move_on_after(drain_timeout):
            await self._wait_until_empty_or(self._life.hurry)
        for job in self._registry:
            job.request_stop(StopReason.DRAIN)
        await self._wait_until_empty_or(None)

    async def _wait_until_empty_or(self, event: anyio.Event | None) -> None:
        while len(self._registry) and not (event is not None and event.is_set()):
            with anyio.move_on_after(0.2):
                await self._registry.changed.wait()

    async def reload(self) -> None:
        """SIGHUP: re-read the handlers and schedules and load them into a fresh fork
        server; swap only once it is ready, and keep the running one on any failure.
        Running jobs finish with the code they started with; [pool] and [supervisor]
        changes need a restart."""
        self.service.reloading()
        try:
            fresh = load_config(self.config.path, require_handlers=True)
        except ConfigError as error:
            log.error("SIGHUP: config not reloaded, keeping the running one: %s", error.message)
            self.service.ready()
            return
        if (fresh.pool, fresh.supervisor) != (self.config.pool, self.config.supervisor):
            log.warning("SIGHUP: [pool] and [supervisor] changes take effect after a restart")
        try:
            server = await self.fork_servers.start(sandboxed_code(fresh))
        except Exception as error:
            log.error("SIGHUP: handlers not reloaded, keeping the running ones: the new fork "
                      "server failed to start: %s", str(error) or type(error).__name__)
            self.service.ready()
            return
        self.config = dataclasses.replace(self.config, handlers=fresh.handlers,
                                          schedules=fresh.schedules)
        self.starter.handlers = fresh.handlers
        self.claimer.handlers = list(fresh.handlers)
        self.claimer.limits = handler_limits(fresh.handlers)
        self.scheduler.reload(fresh.schedules, fresh.handlers)
        self._life.membership.update("update the handlers", handlers=tuple(fresh.handlers),
                                     rebalance=rebalanced(fresh),
                                     shared=shared_handlers(fresh),
                                     sandbox_notes=sandbox_notes(server))
        log.info("SIGHUP: handlers reloaded (%s) in fork server %d",
                 ", ".join(fresh.handlers), server.pid)
        self.service.ready()

    async def _replace_fork_servers(self) -> None:
        await replace_dead_fork_servers(self.fork_servers, lambda: sandboxed_code(self.config),
                                        self._life.give_up)

    async def _count_jobs(self) -> None:
        """The pool's jobs by state and its pauses, for metrics."""
        while True:
            with suppress(StoreFailure):  # the loops that need the store report it
                counts = await self._store.counts()
                pending = await self._store.pending_by_handler(tuple(self.config.handlers))
                metrics.jobs.update(counts, pending)
                paused = await self._store.paused()
                metrics.paused.labels(PAUSE_ALL).set(int(paused.pool))
                for handler in self.config.handlers:
                    metrics.paused.labels(handler).set(int(handler in paused.handlers))
            metrics.tasks.set(len(asyncio.all_tasks()))
            await anyio.sleep(JOB_COUNT_INTERVAL)

    async def _listen(self) -> None:
        failures = StoreFailures("events")
        while True:
            try:
                async with self._store.events(self.config.supervisor.id) as events:
                    failures.succeeded()
                    async for event in events:
                        self._on_event(event.kind, event.key, event.request)
            except StoreFailure as error:
                await anyio.sleep(max(1.0, failures.failed(error)))

    def _on_event(self, kind: str, key: str | None, request: str | None = None) -> None:
        if kind == "wake":
            self.claimer.wake()
            return
        job = self._registry.get(key) if key is not None else None
        if job is None:
            return
        if kind == "stop":
            job.request_stop(StopReason.USER)
        elif kind == "notify":
            job.notes_arrived()
        elif kind == "debug" and request is not None:
            self._background.start_soon(answer_debug, self._store, job, request,
                                        self.config.supervisor.id, name=f"debug {job.key}")


def rebalanced(config: Config) -> tuple[str, ...]:
    """The handlers whose jobs rebalancing may move, for the membership entry."""
    return tuple(name for name, handler in config.handlers.items() if handler.rebalance)


def shared_handlers(config: Config) -> tuple[str, ...]:
    """The handlers whose jobs share a child, for the membership entry (`status`)."""
    return tuple(name for name, handler in config.handlers.items()
                 if handler.child_concurrency > 1)


def handler_limits(handlers: Mapping[str, HandlerConfig]) -> dict[str, Limits]:
    """The pool-wide limits of the handlers that have any, for the claims."""
    return {name: handler.limits for name, handler in handlers.items()
            if not handler.limits.unlimited}
