"""`poolsup run`: one supervisor process, from registration to a clean drain."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable
from contextlib import suppress

import anyio
import anyio.abc

from supervisor.config import Config, load_config
from supervisor.core.admission import Admission
from supervisor.core.leases import fence_deadline
from supervisor.core.outcome import StopReason
from supervisor.core.restarts import ForkServerEnd, GiveUp, decide_restart, recent_ends
from supervisor.core.stats import percentile
from supervisor.errors import (
    ConfigError,
    PoolsupError,
    StaleToken,
    StoreFailure,
)
from supervisor.forks.fork_servers import ForkServers
from supervisor.job.claimer import Claimer
from supervisor.job.lease_keeper import LeaseKeeper
from supervisor.job.runner import SPAWN_RETRY_DELAY, JobServices, JobSettings, run_job
from supervisor.job.running import Registry, RunningJob
from supervisor.job.settle import Settler
from supervisor.pool.membership import Membership
from supervisor.pool.producers import sandboxed_code
from supervisor.pool.rebalancer import Rebalancer
from supervisor.pool.scheduler import Scheduler
from supervisor.service.loops import supervised
from supervisor.service.metrics import metrics
from supervisor.service.sd_notify import (
    NO_SERVICE_MANAGER,
    ServiceEnvironment,
    take_service_environment,
)
from supervisor.service.store_failures import StoreFailures
from supervisor.service.systemd import ServiceReporter
from supervisor.store import opened_store
from supervisor.store.base import Store
from supervisor.store.records import ClaimedJob, SupervisorInfo

log = logging.getLogger("poolsup")

SPAWN_READY_POLL = 0.05
JOB_COUNT_INTERVAL = 5.0


class Supervisor:
    def __init__(
        self, config: Config, store: Store, service: ServiceEnvironment = NO_SERVICE_MANAGER
    ) -> None:
        self.config = config
        self.store = store
        settings = config.supervisor
        info = SupervisorInfo(
            id=settings.id,
            instance=uuid.uuid4().hex,
            host=socket.gethostname(),
            pid=os.getpid(),
            capacity=settings.capacity,
            lease_ttl=settings.lease_ttl,
            started_at=time.time(),
            handlers=tuple(config.handlers),
            rebalance=_rebalanced(config),
        )
        self.membership = Membership(store, info, on_taken=self._id_taken)
        self.registry = Registry(slot_freed=lambda: self.claimer.wake())
        self.keeper = LeaseKeeper(
            store=store,
            registry=self.registry,
            owner=settings.id,
            instance=info.instance,
            lease_ttl=settings.lease_ttl,
            on_membership=lambda state: self.membership.renewed(state, self._background),
        )
        self.claimer = Claimer(
            store=store,
            registry=self.registry,
            owner=settings.id,
            handlers=list(config.handlers),
            capacity=settings.capacity,
            lease_ttl=settings.lease_ttl,
            start_job=self._start_job,
            spawn_ready=self._spawn_ready,
            spawn_possible=lambda: self.fork_servers.current.alive,
        )
        self.rebalancer = Rebalancer(
            store=store, registry=self.registry, owner=settings.id, lease_ttl=settings.lease_ttl
        )
        self.scheduler = Scheduler(
            store=store, owner=settings.id, schedules=config.schedules, handlers=config.handlers,
            fork_server=lambda: self.fork_servers.current,
            max_payload=config.pool.max_payload, max_result=config.pool.max_result,
        )
        outcome_failures = StoreFailures("storing outcomes")
        self.job_services = JobServices(
            store=store,
            registry=self.registry,
            settings=JobSettings(stop_grace=settings.stop_grace,
                                 max_result=config.pool.max_result,
                                 max_checkpoint=config.pool.max_payload),
            outcome_failures=outcome_failures,
            settler=Settler(store, self.registry, outcome_failures),
            note_failures=StoreFailures("notifications"),
            child_started=self.keeper.renew_soon,
        )
        self._fork_servers: ForkServers | None = None
        self._jobs_group: anyio.abc.TaskGroup | None = None
        self._background: anyio.abc.TaskGroup | None = None
        self._shutdown = anyio.Event()
        self._hurry = anyio.Event()
        self._cancel_registration: Callable[[], None] | None = None
        self.outcomes_left_to_recovery = 0
        self.exit_code = 0
        self.service = ServiceReporter(
            environment=service, registry=self.registry, capacity=settings.capacity,
            store_failures=(self.keeper.failures, self.claimer.failures,
                            self.membership.failures, self.job_services.outcome_failures),
            fork_server=lambda: None if self._fork_servers is None else self._fork_servers.current,
            drain_budget=settings.drain_timeout + settings.stop_grace + settings.lease_ttl,
        )

    @property
    def fork_servers(self) -> ForkServers:
        assert self._fork_servers is not None
        return self._fork_servers

    def _start_job(self, claimed: ClaimedJob, claim_sent_at: float) -> None:
        assert self._jobs_group is not None
        handler = self.config.handlers.get(claimed.handler)
        if handler is None:  # claimed just before a reload removed its handler
            self._jobs_group.start_soon(self._hand_back, claimed, name=f"release {claimed.key}")
            return
        job = RunningJob(
            claimed=claimed,
            handler=handler,
            fork_server=self.fork_servers.current,
            fence_at=fence_deadline(claim_sent_at, self.info.lease_ttl),
        )
        admission = self.registry.add(job)
        if admission is Admission.DUPLICATE:
            return  # already running here: starting it again must be a no-op
        if admission is Admission.STALE:
            log.warning("[%s] ignored an outdated claim (token %d)", job.key, job.token)
            return
        self._jobs_group.start_soon(self._run_job, job, name=f"job {claimed.key}")

    async def _hand_back(self, claimed: ClaimedJob) -> None:
        log.warning("[%s] handler %r is no longer configured here; released (token %d)",
                    claimed.key, claimed.handler, claimed.token)
        try:
            await self.store.release(claimed.lease, delay=SPAWN_RETRY_DELAY)
        except (StoreFailure, StaleToken) as error:
            log.warning("[%s] could not release (token %d): %s", claimed.key, claimed.token, error)

    async def _run_job(self, job: RunningJob) -> None:
        try:
            stored = await run_job(job, self.job_services)
            if not stored and self._shutdown.is_set():
                self.outcomes_left_to_recovery += 1
        except Exception:
            # A bug here must cost one job, not the supervisor: kill its child and
            # let the lease expire, so the store's recovery runs it again.
            log.exception("[%s] supervising the job failed (token %d)", job.key, job.token)
            with anyio.CancelScope(shield=True):
                try:
                    await job.fork_server.kill(job.job_id)
                except Exception:
                    log.exception("[%s] could not kill its child (token %d)", job.key, job.token)
        finally:
            self.registry.remove(job)

    async def _spawn_ready(self) -> None:
        """Until the current fork server is alive (a dead one is being replaced)."""
        # Polled, and only in the moments while a dead fork server is being replaced.
        while not self.fork_servers.current.alive:  # noqa: ASYNC110
            await anyio.sleep(SPAWN_READY_POLL)

    async def serve(self) -> None:
        async with anyio.create_task_group() as signals_group:
            await signals_group.start(self._watch_signals)
            with anyio.CancelScope() as registering:
                self._cancel_registration = registering.cancel
                await self.membership.join()
            self._cancel_registration = None
            if registering.cancel_called:
                log.info("stopped before serving; nothing ran")
                signals_group.cancel_scope.cancel()
                return
            await self._serve_registered()
            signals_group.cancel_scope.cancel()

    async def _serve_registered(self) -> None:
        async with anyio.create_task_group() as servers_group:
            self._fork_servers = ForkServers(servers_group)
            await self.fork_servers.start(sandboxed_code(self.config))
            async with anyio.create_task_group() as jobs_group:
                self._jobs_group = jobs_group
                async with anyio.create_task_group() as background:
                    self._background = background
                    log.info(
                        "supervisor %s serving pool %s (capacity %d, lease_ttl %g s, "
                        "handlers: %s)",
                        self.info.id, self.config.pool.name, self.info.capacity,
                        self.info.lease_ttl, ", ".join(self.config.handlers),
                    )
                    self.service.ready()
                    loops = {
                        "service reporter": self.service.run,
                        "claimer": self.claimer.run,
                        "rebalancer": self.rebalancer.run,
                        "scheduler": self.scheduler.run,
                        "event listener": self._listen,
                        "fork server replacement": self._replace_dead_fork_servers,
                    }
                    if metrics.on:
                        loops["job counts"] = self._count_jobs
                    background.start_soon(supervised, "lease keeper", self.keeper.run,
                                          self._lease_keeper_died, name="lease keeper")
                    for name, loop in loops.items():
                        background.start_soon(supervised, name, loop, name=name)
                    await self._shutdown.wait()
                    await self._drain()
                    background.cancel_scope.cancel()
            servers_group.cancel_scope.cancel()
        await self.membership.leave(store_failing=self.keeper.failures.failing)
        if self.outcomes_left_to_recovery:
            log.warning("%d outcome(s) could not be stored and are left to the store's "
                        "recovery; exiting 1", self.outcomes_left_to_recovery)
            self.exit_code = 1
        stats = self.keeper.stats
        log.info(
            "renewals: %d ok, %d failed, %d lease(s) lost; lag p50 %.1f ms p99 %.1f ms "
            "max %.1f ms",
            stats.renewals, stats.failures, stats.leases_lost,
            percentile(stats.lags, 0.5) * 1000, percentile(stats.lags, 0.99) * 1000,
            max(stats.lags, default=0.0) * 1000,
        )
        log.info("supervisor %s stopped", self.info.id)

    @property
    def info(self) -> SupervisorInfo:
        return self.membership.info

    def _lease_keeper_died(self) -> None:
        """Nothing renews the leases any more: stop every job now and exit 1; the fork
        server fences whatever outlives its lease."""
        log.critical("no lease is renewed any more: stopping every job and exiting 1")
        self.exit_code = 1
        self._shutdown.set()
        self._hurry.set()

    def _id_taken(self) -> None:
        self.exit_code = 1
        self._shutdown.set()

    async def _drain(self) -> None:
        self.service.stopping()
        self.claimer.stop()
        self.rebalancer.stop()
        self.scheduler.stop()
        assert self._background is not None
        self.membership.update(self._background, "mark this supervisor draining",
                               state="draining")
        drain_timeout = self.config.supervisor.drain_timeout
        if len(self.registry):
            log.info("draining %d job(s), up to %g s", len(self.registry), drain_timeout)
        with anyio.move_on_after(drain_timeout):
            await self._wait_until_empty_or(self._hurry)
        for job in self.registry:
            job.request_stop(StopReason.DRAIN)
        await self._wait_until_empty_or(None)

    async def _wait_until_empty_or(self, event: anyio.Event | None) -> None:
        while len(self.registry) and not (event is not None and event.is_set()):
            with anyio.move_on_after(0.2):
                await self.registry.changed.wait()

    async def _count_jobs(self) -> None:
        """The pool's jobs by state, for metrics."""
        while True:
            with suppress(StoreFailure):  # the loops that need the store report it
                counts = await self.store.counts()
                for state, count in counts.items():
                    metrics.jobs.labels(state).set(count)
            await anyio.sleep(JOB_COUNT_INTERVAL)

    async def _listen(self) -> None:
        failures = StoreFailures("events")
        while True:
            try:
                async with self.store.events() as events:
                    failures.succeeded()
                    async for event in events:
                        self._on_event(event.kind, event.key)
            except StoreFailure as error:
                await anyio.sleep(max(1.0, failures.failed(error)))

    def _on_event(self, kind: str, key: str | None) -> None:
        if kind == "wake":
            self.claimer.wake()
            return
        job = self.registry.get(key) if key is not None else None
        if job is None:
            return
        if kind == "stop":
            job.request_stop(StopReason.USER)
        elif kind == "notify":
            job.notes_arrived()

    async def _watch_signals(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            task_status.started()
            async for signum in signals:
                if signum == signal.SIGHUP and self._fork_servers is None:
                    log.info("SIGHUP before serving: nothing to reload yet")
                elif signum != signal.SIGHUP and self._cancel_registration is not None:
                    log.info("%s before serving", signal.Signals(signum).name)
                    self._cancel_registration()
                elif signum == signal.SIGHUP:
                    self.service.reloading()
                    await self._reload()
                    self.service.ready()
                elif self._shutdown.is_set():
                    log.info("second %s: stopping running jobs now", signal.Signals(signum).name)
                    self._hurry.set()
                else:
                    log.info("%s: draining", signal.Signals(signum).name)
                    self._shutdown.set()

    async def _reload(self) -> None:
        """SIGHUP: re-read the handlers and schedules and load them into a fresh fork
        server; swap only once it is ready, and keep the running one on any failure.
        Running jobs finish with the code they started with; [pool] and [supervisor]
        changes need a restart."""
        try:
            fresh = load_config(self.config.path, require_handlers=True)
        except ConfigError as error:
            log.error("SIGHUP: config not reloaded, keeping the running one: %s", error.message)
            return
        if (fresh.pool, fresh.supervisor) != (self.config.pool, self.config.supervisor):
            log.warning("SIGHUP: [pool] and [supervisor] changes take effect after a restart")
        try:
            server = await self.fork_servers.start(sandboxed_code(fresh))
        except Exception as error:
            log.error("SIGHUP: handlers not reloaded, keeping the running ones: the new fork "
                      "server failed to start: %s", str(error) or type(error).__name__)
            return
        self.config = dataclasses.replace(self.config, handlers=fresh.handlers,
                                          schedules=fresh.schedules)
        self.claimer.handlers = list(fresh.handlers)
        self.scheduler.reload(fresh.schedules, fresh.handlers)
        assert self._background is not None
        self.membership.update(self._background, "update the handlers",
                               handlers=tuple(fresh.handlers), rebalance=_rebalanced(fresh))
        log.info("SIGHUP: handlers reloaded (%s) in fork server %d",
                 ", ".join(fresh.handlers), server.pid)

    async def _replace_dead_fork_servers(self) -> None:
        """Start a new fork server when the current one dies; give up (exit 1) only on
        the deaths no job explains (`core.restarts`)."""
        ends: list[ForkServerEnd] = []
        while True:
            current = self.fork_servers.current
            await current.died.wait()
            if current is not self.fork_servers.current:
                continue  # a retired one died; nothing new to start
            now = anyio.current_time()
            ends = recent_ends([*ends, ForkServerEnd(at=now, uptime=now - current.started_at,
                                                     forked=current.forked)], now)
            log.error("fork server %d died; starting a new one", current.pid)
            while current is self.fork_servers.current:
                decision = decide_restart(ends, anyio.current_time())
                if isinstance(decision, GiveUp):
                    log.error("fork server keeps dying (%s); shutting down", decision.why)
                    self.exit_code = 1
                    self._shutdown.set()
                    self._hurry.set()
                    return
                await anyio.sleep(decision.delay)
                try:
                    await self.fork_servers.start(sandboxed_code(self.config))
                except Exception as error:
                    log.error("could not start a fork server: %s",
                              str(error) or type(error).__name__)
                    ends.append(ForkServerEnd(at=anyio.current_time(), uptime=0.0,
                                              forked=False))


def _rebalanced(config: Config) -> tuple[str, ...]:
    """The handlers whose jobs rebalancing may move, for the membership entry."""
    return tuple(name for name, handler in config.handlers.items() if handler.rebalance)


async def serve(config: Config) -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    service = take_service_environment(os.environ)  # before any process is started
    if config.metrics is not None:
        listen = config.metrics
        try:
            metrics.serve(listen.host, listen.port, supervisor=config.supervisor.id)
        except OSError as error:
            raise PoolsupError(f"[metrics] listen {listen.host}:{listen.port}: "
                               f"{error.strerror or error}") from None
    try:
        async with opened_store(
            config.pool.store, config.pool.name, retention=config.pool.retention
        ) as store:
            supervisor = Supervisor(config, store, service)
            await supervisor.serve()
            return supervisor.exit_code
    finally:
        metrics.close()
