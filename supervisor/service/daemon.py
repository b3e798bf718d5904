"""`poolsup run`: one supervisor process, from registration to a clean drain."""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import anyio.to_thread

from supervisor.config import Config
from supervisor.core.stats import percentile
from supervisor.doorbell import Doorbell
from supervisor.errors import PoolsupError, StoreFailure
from supervisor.forks.fork_servers import ForkServers, sandbox_notes
from supervisor.job.lease_keeper import LeaseKeeper
from supervisor.job.results import PendingResults
from supervisor.job.runner import JobServices, JobSettings
from supervisor.job.running import Registry
from supervisor.job.settle import Settler
from supervisor.observe.metrics import metrics
from supervisor.observe.store_failures import StoreFailures
from supervisor.observe.tracing import open_tracing
from supervisor.pool.membership import Membership
from supervisor.pool.producers import sandboxed_code
from supervisor.service import init_reaper
from supervisor.service.loops import supervised
from supervisor.service.sd_notify import (
    NO_SERVICE_MANAGER,
    ServiceEnvironment,
    take_service_environment,
)
from supervisor.service.serving import Lifetime, Serving, rebalanced, shared_handlers
from supervisor.store import opened_store
from supervisor.store.base import Store
from supervisor.store.records import SupervisorInfo

if TYPE_CHECKING:
    from supervisor.observe.otel import Tracing

log = logging.getLogger("poolsup")

TRACES_FLUSH_WAIT = 3.0  # seconds at exit for the exporters to send the last spans


class Supervisor:
    """Joins the pool, serves it (`service/serving.py`) until a signal or a fatal
    condition asks for a drain, then leaves.  What lives as long as the process -
    membership, held jobs, renewals - is made here; what needs the fork servers and the
    task groups is made by `Serving` once they exist."""

    def __init__(
        self, config: Config, store: Store, environment: ServiceEnvironment = NO_SERVICE_MANAGER
    ) -> None:
        self.config = config
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
            rebalance=rebalanced(config),
            shared=shared_handlers(config),
        )
        membership = Membership(store, info, on_taken=self._id_taken)
        claims_wanted = Doorbell()
        registry = Registry(slot_freed=claims_wanted.ring)
        keeper = LeaseKeeper(store=store, registry=registry, owner=settings.id,
                             instance=info.instance, lease_ttl=settings.lease_ttl,
                             on_membership=membership.renewed)
        outcome_failures = StoreFailures("storing outcomes")
        shutdown = anyio.Event()
        results = PendingResults(wake_claimer=claims_wanted.ring)
        services = JobServices(
            store=store,
            registry=registry,
            settings=JobSettings(stop_grace=settings.stop_grace,
                                 max_result=config.pool.max_result,
                                 max_checkpoint=config.pool.max_payload,
                                 max_log=config.pool.max_log),
            outcome_failures=outcome_failures,
            settler=Settler(store, registry, outcome_failures, lease_ttl=settings.lease_ttl,
                            draining=shutdown, with_claim=results.complete),
            note_failures=StoreFailures("notifications"),
            output_failures=StoreFailures("job output"),
            child_started=keeper.renew_soon,
            tracing=open_tracing(os.environ, settings.id),
        )
        self.life = Lifetime(
            membership=membership, keeper=keeper, services=services,
            claims_wanted=claims_wanted, claim_failures=StoreFailures("claim"), results=results,
            environment=environment, shutdown=shutdown, hurry=anyio.Event(),
            give_up=self._give_up,
        )
        self._serving: Serving | None = None  # None until registered
        self._cancel_registration: Callable[[], None] | None = None
        self.exit_code = 0

    @property
    def info(self) -> SupervisorInfo:
        return self.life.membership.info

    async def serve(self) -> None:
        async with anyio.create_task_group() as signals_group:
            await signals_group.start(self._watch_signals)
            if init_reaper.is_init():  # a container's: orphans come to us
                signals_group.start_soon(supervised, "init reaper", init_reaper.reap_orphans)
            with anyio.CancelScope() as registering:
                self._cancel_registration = registering.cancel
                await self.life.membership.join()
            self._cancel_registration = None
            if registering.cancel_called:
                log.info("stopped before serving; nothing ran")
                signals_group.cancel_scope.cancel()
                return
            await self._apply_pool_settings()
            await self._serve_registered()
            signals_group.cancel_scope.cancel()

    async def _apply_pool_settings(self) -> None:
        """Hand the store the [pool] settings it enforces; the last supervisor to start
        sets them for the pool."""
        limit = self.config.pool.max_pending
        try:
            await self.life.services.store.set_max_pending(limit)
        except StoreFailure as error:
            log.warning("could not set the pool's max_pending (%s) in the store: %s",
                        "none" if limit is None else limit, error.message)

    async def _serve_registered(self) -> None:
        life = self.life
        async with anyio.create_task_group() as servers_group:
            fork_servers = ForkServers(servers_group,
                                       tracing=life.services.tracing is not None)
            server = await fork_servers.start(sandboxed_code(self.config))
            if notes := sandbox_notes(server):
                life.membership.update("say what the sandbox cannot enforce here",
                                       sandbox_notes=notes)
            # The background loops end before the jobs' tasks, which the drain ends.
            async with (anyio.create_task_group() as jobs_group,
                        anyio.create_task_group() as background):
                serving = Serving(self.config, life, fork_servers, jobs_group, background)
                log.info(
                    "supervisor %s serving pool %s (capacity %d, lease_ttl %g s, handlers: %s)",
                    self.info.id, self.config.pool.name, self.info.capacity,
                    self.info.lease_ttl, ", ".join(self.config.handlers),
                )
                self._serving = serving
                serving.start(lease_keeper_died=self._lease_keeper_died)
                await life.shutdown.wait()
                await serving.drain()
                background.cancel_scope.cancel()
            servers_group.cancel_scope.cancel()
        await life.membership.leave(store_failing=life.keeper.failures.failing)
        if left := serving.starter.outcomes_left_to_recovery:
            log.warning("%d outcome(s) could not be stored and are left to the store's "
                        "recovery; exiting 1", left)
            self.exit_code = 1
        stats = life.keeper.stats
        log.info(
            "renewals: %d ok, %d failed, %d lease(s) lost; lag p50 %.1f ms p99 %.1f ms "
            "max %.1f ms",
            stats.renewals, stats.failures, stats.leases_lost,
            percentile(stats.lags, 0.5) * 1000, percentile(stats.lags, 0.99) * 1000,
            max(stats.lags, default=0.0) * 1000,
        )
        log.info("supervisor %s stopped", self.info.id)

    def _lease_keeper_died(self) -> None:
        """Nothing renews the leases any more: stop every job now and exit 1; the fork
        server fences whatever outlives its lease."""
        log.critical("no lease is renewed any more: stopping every job and exiting 1")
        self._give_up()

    def _give_up(self) -> None:
        """Exit 1, stopping the running jobs now."""
        self.exit_code = 1
        self.life.shutdown.set()
        self.life.hurry.set()

    def _id_taken(self) -> None:
        self.exit_code = 1
        self.life.shutdown.set()

    async def _watch_signals(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        life = self.life
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            task_status.started()
            async for signum in signals:
                if signum == signal.SIGHUP and self._serving is None:
                    log.info("SIGHUP before serving: nothing to reload yet")
                elif signum != signal.SIGHUP and self._cancel_registration is not None:
                    log.info("%s before serving", signal.Signals(signum).name)
                    self._cancel_registration()
                elif signum == signal.SIGHUP and self._serving is not None:
                    await self._serving.reload()
                elif life.shutdown.is_set():
                    log.info("second %s: stopping running jobs now", signal.Signals(signum).name)
                    life.hurry.set()
                else:
                    log.info("%s: draining", signal.Signals(signum).name)
                    life.shutdown.set()


async def serve(config: Config) -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    environment = take_service_environment(os.environ)  # before any process is started
    if config.metrics is not None:
        listen = config.metrics
        try:
            metrics.serve(listen.host, listen.port, supervisor=config.supervisor.id)
        except OSError as error:
            raise PoolsupError(f"[metrics] listen {listen.host}:{listen.port}: "
                               f"{error.strerror or error}") from None
    try:
        async with opened_store(
            config.pool.store, config.pool.name, retention=config.pool.retention,
            wait_replicas=config.pool.wait_replicas,
        ) as store:
            supervisor = Supervisor(config, store, environment)
            try:
                await supervisor.serve()
            finally:
                await _close_tracing(supervisor.life.services.tracing)
            return supervisor.exit_code
    finally:
        metrics.close()


async def _close_tracing(tracing: Tracing | None) -> None:
    """Export the spans still queued, for at most TRACES_FLUSH_WAIT."""
    if tracing is None:
        return
    if not await anyio.to_thread.run_sync(tracing.shutdown, TRACES_FLUSH_WAIT):
        log.warning("the last spans were not exported within %g s", TRACES_FLUSH_WAIT)
