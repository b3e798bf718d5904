"""`poolsup run`: one supervisor process, from registration to a clean drain."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import time
import uuid

import anyio
import anyio.abc

from supervisor.children import ForkServer, open_fork_server
from supervisor.claimer import Claimer
from supervisor.config import Config
from supervisor.core.outcome import StopReason
from supervisor.core.stats import percentile
from supervisor.errors import StoreUnavailable, SupervisorIdTaken
from supervisor.job_runner import JobSettings, run_job
from supervisor.lease_keeper import LeaseKeeper
from supervisor.running import Registry, RunningJob
from supervisor.store import opened_store
from supervisor.store.base import ClaimedJob, Store, SupervisorInfo

log = logging.getLogger("poolsup")


class Supervisor:
    def __init__(self, config: Config, store: Store, fork_server: ForkServer) -> None:
        self.config = config
        self.store = store
        self.fork_server = fork_server
        self.registry = Registry()
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
            owner=settings.id, lease_ttl=settings.lease_ttl, stop_grace=settings.stop_grace
        )
        self.keeper = LeaseKeeper(
            store=store,
            fork_server=fork_server,
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

    def _start_job(self, claimed: ClaimedJob, claim_sent_at: float) -> None:
        job = RunningJob(claimed=claimed, handler=self.config.handlers[claimed.handler])
        if not self.registry.add(job):
            return  # already running here: starting it again must be a no-op
        assert self._jobs_group is not None
        self._jobs_group.start_soon(self._run_job, job, claim_sent_at, name=f"job {claimed.key}")

    async def _run_job(self, job: RunningJob, claim_sent_at: float) -> None:
        try:
            await run_job(
                job,
                store=self.store,
                fork_server=self.fork_server,
                settings=self.job_settings,
                registry=self.registry,
                claim_sent_at=claim_sent_at,
            )
        except Exception:
            # A bug here must cost one job, not the supervisor: kill its child and
            # let the lease expire, so the store's recovery runs it again.
            log.exception("[%s] supervising the job failed", job.key)
            with anyio.CancelScope(shield=True):
                await self.fork_server.kill(job.job_id)
        finally:
            self.registry.remove(job)

    async def serve(self) -> None:
        await self._register()
        log.info(
            "supervisor %s serving pool %s (capacity %d, lease_ttl %g s, handlers: %s)",
            self.info.id, self.config.pool.name, self.info.capacity, self.info.lease_ttl,
            ", ".join(self.config.handlers),
        )
        async with anyio.create_task_group() as jobs_group:
            self._jobs_group = jobs_group
            async with anyio.create_task_group() as background:
                background.start_soon(self.keeper.run)
                background.start_soon(self.claimer.run)
                background.start_soon(self._listen)
                background.start_soon(self._watch_signals)
                background.start_soon(self._watch_fork_server)
                await self._shutdown.wait()
                await self._drain()
                background.cancel_scope.cancel()
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
        self.info = SupervisorInfo(**{**self.info.__dict__, "state": "draining"})
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

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                if signum == signal.SIGHUP:
                    log.info("SIGHUP: handler reload is not supported yet; ignoring")
                    continue
                if self._shutdown.is_set():
                    log.info("second %s: stopping running jobs now", signal.Signals(signum).name)
                    self._hurry.set()
                else:
                    log.info("%s: draining", signal.Signals(signum).name)
                    self._shutdown.set()

    async def _watch_fork_server(self) -> None:
        await self.fork_server.died.wait()
        log.error("fork server died; shutting down")
        self._shutdown.set()
        self._hurry.set()


async def serve(config: Config) -> None:
    async with opened_store(
        config.pool.store, config.pool.name, retention=config.pool.retention
    ) as store, open_fork_server(config.handlers) as fork_server:
        for name, error in fork_server.handler_errors.items():
            if error:
                log.error("handler %s failed to import; its jobs will fail: %s", name,
                          error.strip().splitlines()[-1])
        await Supervisor(config, store, fork_server).serve()
