"""`poolsup run`: one supervisor process, from registration to a clean drain."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import socket
import time
import uuid

import anyio
import anyio.abc

from supervisor.claimer import Claimer
from supervisor.config import Config, load_config
from supervisor.core.outcome import StopReason
from supervisor.core.stats import percentile
from supervisor.errors import ConfigError, StoreUnavailable, SupervisorIdTaken
from supervisor.fork_servers import ForkServers
from supervisor.job_runner import JobSettings, run_job
from supervisor.lease_keeper import LeaseKeeper
from supervisor.running import Registry, RunningJob
from supervisor.store import opened_store
from supervisor.store.base import ClaimedJob, Store, SupervisorInfo

log = logging.getLogger("poolsup")

MAX_FORK_SERVER_RESTARTS = 5


class Supervisor:
    def __init__(self, config: Config, store: Store) -> None:
        self.config = config
        self.store = store
        self.registry = Registry()
        self._fork_servers: ForkServers | None = None
        settings = config.supervisor
        self.info = SupervisorInfo(
            id=settings.id,
            instance=uuid.uuid4().hex,
            host=socket.gethostname(),
            pid=os.getpid(),
            capacity=settings.capacity,
            lease_ttl=settings.lease_ttl,
            started_at=time.time(),
        )
        self.job_settings = JobSettings(
            lease_ttl=settings.lease_ttl, stop_grace=settings.stop_grace
        )
        self.keeper = LeaseKeeper(
            store=store,
            registry=self.registry,
            owner=settings.id,
            lease_ttl=settings.lease_ttl,
        )
        self._jobs_group: anyio.abc.TaskGroup | None = None
        self.claimer = Claimer(
            store=store,
            registry=self.registry,
            owner=settings.id,
            handlers=list(config.handlers),
            capacity=settings.capacity,
            lease_ttl=settings.lease_ttl,
            start_job=self._start_job,
        )
        self.registry.slot_freed = self.claimer.wake
        self._shutdown = anyio.Event()
        self._hurry = anyio.Event()
        self.exit_code = 0

    @property
    def fork_servers(self) -> ForkServers:
        assert self._fork_servers is not None
        return self._fork_servers

    def _start_job(self, claimed: ClaimedJob, claim_sent_at: float) -> None:
        job = RunningJob(
            claimed=claimed,
            handler=self.config.handlers[claimed.handler],
            fork_server=self.fork_servers.current,
        )
        if not self.registry.add(job):
            return  # already running here: starting it again must be a no-op
        assert self._jobs_group is not None
        self._jobs_group.start_soon(self._run_job, job, claim_sent_at, name=f"job {claimed.key}")

    async def _run_job(self, job: RunningJob, claim_sent_at: float) -> None:
        try:
            await run_job(
                job,
                store=self.store,
                settings=self.job_settings,
                registry=self.registry,
                claim_sent_at=claim_sent_at,
            )
        except Exception:
            # A bug here must cost one job, not the supervisor: kill its child and
            # let the lease expire, so the store's recovery runs it again.
            log.exception("[%s] supervising the job failed", job.key)
            with anyio.CancelScope(shield=True):
                await job.fork_server.kill(job.job_id)
        finally:
            self.registry.remove(job)

    async def serve(self) -> None:
        await self._register()
        async with anyio.create_task_group() as servers_group:
            self._fork_servers = ForkServers(servers_group)
            await self.fork_servers.start(self.config.handlers)
            async with anyio.create_task_group() as jobs_group:
                self._jobs_group = jobs_group
                async with anyio.create_task_group() as background:
                    await background.start(self._watch_signals)
                    log.info(
                        "supervisor %s serving pool %s (capacity %d, lease_ttl %g s, "
                        "handlers: %s)",
                        self.info.id, self.config.pool.name, self.info.capacity,
                        self.info.lease_ttl, ", ".join(self.config.handlers),
                    )
                    background.start_soon(self.keeper.run)
                    background.start_soon(self.claimer.run)
                    background.start_soon(self._listen)
                    background.start_soon(self._replace_dead_fork_servers)
                    await self._shutdown.wait()
                    await self._drain()
                    background.cancel_scope.cancel()
            servers_group.cancel_scope.cancel()
        try:
            await self.store.deregister(self.info.id, self.info.instance)
        except StoreUnavailable as error:
            log.warning("could not deregister: %s", error)
        stats = self.keeper.stats
        log.info(
            "renewals: %d ok, %d failed, %d lease(s) lost; lag p50 %.1f ms p99 %.1f ms "
            "max %.1f ms",
            stats.renewals, stats.failures, stats.leases_lost,
            percentile(stats.lags, 0.5) * 1000, percentile(stats.lags, 0.99) * 1000,
            max(stats.lags, default=0.0) * 1000,
        )
        log.info("supervisor %s stopped", self.info.id)

    async def _register(self) -> None:
        deadline = time.monotonic() + self.info.lease_ttl + 1.0
        while True:
            try:
                await self.store.register(self.info)
                return
            except SupervisorIdTaken:
                if time.monotonic() > deadline:
                    raise
                await anyio.sleep(0.5)

    async def _drain(self) -> None:
        self.claimer.stop()
        self.info = dataclasses.replace(self.info, state="draining")
        with contextlib.suppress(StoreUnavailable, SupervisorIdTaken):
            await self.store.register(self.info)
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

    async def _listen(self) -> None:
        while True:
            try:
                async with self.store.events() as events:
                    async for event in events:
                        self._on_event(event.kind, event.key)
            except StoreUnavailable as error:
                log.warning("event subscription lost: %s", error)
                await anyio.sleep(1.0)

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
            job.notes_waiting.set()

    async def _watch_signals(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            task_status.started()
            async for signum in signals:
                if signum == signal.SIGHUP:
                    await self._reload()
                elif self._shutdown.is_set():
                    log.info("second %s: stopping running jobs now", signal.Signals(signum).name)
                    self._hurry.set()
                else:
                    log.info("%s: draining", signal.Signals(signum).name)
                    self._shutdown.set()

    async def _reload(self) -> None:
        """SIGHUP: re-read the handlers and load them into a fresh fork server.  Running
        jobs finish with the code they started with; [pool] and [supervisor] changes
        need a restart."""
        try:
            fresh = load_config(self.config.path, require_handlers=True)
        except ConfigError as error:
            log.error("SIGHUP: config not reloaded, keeping the running one: %s", error.message)
            return
        if (fresh.pool, fresh.supervisor) != (self.config.pool, self.config.supervisor):
            log.warning("SIGHUP: [pool] and [supervisor] changes take effect after a restart")
        self.config = dataclasses.replace(self.config, handlers=fresh.handlers)
        self.claimer.handlers = list(fresh.handlers)
        server = await self.fork_servers.start(fresh.handlers)
        log.info("SIGHUP: handlers reloaded (%s) in fork server %d",
                 ", ".join(fresh.handlers), server.pid)

    async def _replace_dead_fork_servers(self) -> None:
        failures = 0
        while True:
            current = self.fork_servers.current
            await current.died.wait()
            if current is not self.fork_servers.current:
                continue  # a retired one died; nothing new to start
            failures += 1
            if failures > MAX_FORK_SERVER_RESTARTS:
                log.error("fork server keeps dying; shutting down")
                self.exit_code = 1
                self._shutdown.set()
                self._hurry.set()
                return
            log.error("fork server %d died; starting a new one", current.pid)
            await anyio.sleep(min(5.0, 0.1 * 2**failures))
            await self.fork_servers.start(self.config.handlers)


async def serve(config: Config) -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    async with opened_store(
        config.pool.store, config.pool.name, retention=config.pool.retention
    ) as store:
        supervisor = Supervisor(config, store)
        await supervisor.serve()
        return supervisor.exit_code
