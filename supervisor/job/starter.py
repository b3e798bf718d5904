"""Claimed jobs into running ones: fence each, admit it among the runs held here, and
run it (`job/runner.py`) in a task of its own; a job whose handler is gone goes back."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import anyio
import anyio.abc

from supervisor.config import HandlerConfig
from supervisor.core.admission import Admission
from supervisor.core.leases import fence_deadline
from supervisor.errors import StaleToken, StoreFailure
from supervisor.forks.fork_servers import ForkServers
from supervisor.job.runner import SPAWN_RETRY_DELAY, JobServices, run_job
from supervisor.job.running import RunningJob
from supervisor.observe.job_log import JobLog
from supervisor.store.records import ClaimedJob

log = logging.getLogger("poolsup")


class JobStarter:
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
        self._group.start_soon(self._run, job, name=f"job {claimed.key}")

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
