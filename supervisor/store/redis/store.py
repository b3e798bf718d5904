"""The Redis store: every state change is one Lua script, so one round trip, atomic.

Key layout (see redis/keys.py): a hash per job (a delayed one is due at its
`run_at`, in `pending` and its queue like a retry held back), `pending` and `running` zsets that
order work by due time and lease deadline, one `queue:<handler>` zset per handler
(its pending jobs, for claiming), one `reserved:<supervisor>` zset per move target,
one `done:<state>` zset per final state for listing and retention, a token counter,
the membership (`sup`, `seen`), the store's health, and the schedules: a record
hash per schedule, the set of their names and an index of each one's jobs
(redis/dispatch.py).  All of a pool's keys share one
hash tag.  Times come from Redis TIME.

`members` and `snapshot` read with plain commands and one script that calls no write
command (lua/members-3.lua), so that they work while Redis refuses writes.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, cast

import anyio
import anyio.to_thread
import orjson

from supervisor.core.limits import Limits
from supervisor.errors import ConfigError, DispatchRefused, JobNotFound, StoreFailure
from supervisor.redaction import redact_url
from supervisor.store.members import encode_info
from supervisor.store.policy import (
    HEALTH_GAP,
    JUDGE_AFTER_GAP,
    MIN_CLAIM_GAP,
    MIN_FAILING_SPAN,
    claim_deadline,
)
from supervisor.store.records import (
    FINISHED_STATES,
    ClaimBatch,
    Completion,
    DispatchRequest,
    FiredTick,
    JobRecord,
    JobState,
    JobStats,
    Lease,
    Membership,
    MembershipState,
    Note,
    Paused,
    PoolSnapshot,
    RenewResult,
    RunOutput,
    ScheduleBook,
    StoreEvent,
    SupervisorInfo,
    TickRequest,
    TickResult,
)
from supervisor.store.redis.claim import claim_batch, limits_arg
from supervisor.store.redis.connection import (
    SOCKET_TIMEOUT,
    RedisClient,
    connect,
    translated_errors,
)
from supervisor.store.redis.debug import RedisDebug
from supervisor.store.redis.dispatch import RedisDispatch
from supervisor.store.redis.events import ended_hint, open_feed
from supervisor.store.redis.keys import PoolKeys
from supervisor.store.redis.leases import RedisLeaseEnds
from supervisor.store.redis.notes import RedisNotes
from supervisor.store.redis.output import RedisOutput
from supervisor.store.redis.reads import RedisReads
from supervisor.store.redis.records import milliseconds, seconds
from supervisor.store.redis.replicated import ReplicatedWrites
from supervisor.store.redis.retry import retry_job
from supervisor.store.redis.scripts import ScriptArg, Scripts, commands
from supervisor.store.redis.steering import RedisSteering
from supervisor.store.witness import FailureWitness

DEFAULT_RETENTION = 86400.0
# 2: pending jobs are also in one claim queue per handler; 3: the running jobs are
# counted per owner and handler in running-load (lua/upgrade-layout-3.lua).
LAYOUT = 3
NO_LOCK_DELAY_ENV = "POOLSUP_TEST_NO_LOCK_DELAY"


def _key_tokens(flat: list[bytes]) -> frozenset[tuple[str, int]]:
    """A script's {key, token, key, token, ...} answer as (key, token) pairs."""
    return frozenset((key.decode(), int(token)) for key, token in zip(flat[::2], flat[1::2],
                                                                       strict=True))


def _optional(value: float | None) -> ScriptArg:
    return "" if value is None else value


class RedisStore:
    """`Store` on Redis 6.2+ or Valkey (redis://, rediss://, unix://)."""

    def __init__(self, url: str, pool: str, *, retention: float, wait_replicas: int = 0) -> None:
        self.pool = pool
        self._keys = PoolKeys(pool)
        self._where = redact_url(url)
        self._retention_ms = max(1, round(milliseconds(retention)))
        try:
            self._connection = connect(url)
        except ValueError as exc:
            raise ConfigError(f"store URL {self._where!r}: {exc}") from exc
        self._client: RedisClient = self._connection.client
        self._scripts = Scripts(self._client)
        self._replicated = ReplicatedWrites(self._scripts, self._where, wait_replicas)
        self._witness = FailureWitness(time.monotonic, max_wait=SOCKET_TIMEOUT + 1.0)
        self._layout_checked = False
        # Only for the tests that show the lock-delay is needed (tests/integration/
        # test_failover.py): without it a failover that lost writes runs a job twice.
        self._no_lock_delay = os.environ.get(NO_LOCK_DELAY_ENV) == "1"
        self._dispatch = RedisDispatch(self._client, self._keys, self._run, self._where)
        self._reads = RedisReads(self._client, self._keys, self._run, self._where, pool=pool,
                                 retention_ms=self._retention_ms,
                                 master=self._master_address)
        self._debug = RedisDebug(self._client, self._keys, self._where)
        self._notes = RedisNotes(self._keys, self._run)
        self._output = RedisOutput(self._client, self._keys, self._run, self._where)
        self._ends = RedisLeaseEnds(self._client, self._keys, self._run, self._where,
                                    retention_ms=self._retention_ms)
        self._steering = RedisSteering(self._client, self._keys, self._run, self._where,
                                       retention_ms=self._retention_ms)

    @classmethod
    async def open(
        cls, url: str, pool: str, *, retention: float = DEFAULT_RETENTION,
        wait_replicas: int = 0,
    ) -> RedisStore:
        """A store for `url`; it connects on first use (see `ping`).  With `wait_replicas`,
        a dispatch returns and a claim hands out jobs only once that many replicas hold
        them (redis/wait.py)."""
        await anyio.to_thread.run_sync(commands)  # read the Lua files off the event loop
        return cls(url, pool, retention=retention, wait_replicas=wait_replicas)

    async def dispatch(self, request: DispatchRequest) -> None:
        await self._dispatch.dispatch(request)

    async def dispatch_many(
        self, requests: Sequence[DispatchRequest], *, fired: FiredTick | None = None
    ) -> list[bool]:
        return await self._dispatch.dispatch_many(requests, fired=fired)

    async def dispatch_each(
        self, requests: Sequence[DispatchRequest]
    ) -> list[DispatchRefused | None]:
        return await self._dispatch.dispatch_each(requests)

    async def pause(self, handlers: Sequence[str] = ()) -> None:
        await self._steering.pause(handlers)

    async def resume(self, handlers: Sequence[str] = ()) -> None:
        await self._steering.resume(handlers)

    async def paused(self) -> Paused:
        return await self._steering.paused()

    async def request_stacks(self, key: str) -> str:
        return await self._debug.request_stacks(key)

    async def answer_stacks(self, request: str, answer: bytes) -> None:
        await self._debug.answer_stacks(request, answer)

    async def stacks_answer(self, request: str, timeout: float) -> bytes | None:
        return await self._debug.stacks_answer(request, timeout)

    async def append_output(self, lease: Lease, attempt: int, data: bytes, *, at: int,
                            max_bytes: int, ended: bool = False) -> None:
        await self._output.append_output(lease, attempt, data, at=at, max_bytes=max_bytes,
                                         ended=ended)

    async def output(self, key: str, offsets: Mapping[int, int] | None = None
                     ) -> list[RunOutput]:
        return await self._output.output(key, offsets)

    async def set_max_pending(self, limit: int | None) -> None:
        await self._steering.set_max_pending(limit)

    async def starts_within(self, handler: str, period: float) -> tuple[float, list[float]]:
        return await self._steering.starts_within(handler, period)

    async def fire_tick(self, request: TickRequest) -> TickResult:
        return await self._dispatch.fire_tick(request)

    async def record_tick_outcome(self, fired: FiredTick, outcome: str, detail: bytes) -> bool:
        return await self._dispatch.record_tick_outcome(fired, outcome, detail)

    async def schedules(self) -> ScheduleBook:
        return await self._dispatch.schedules()

    async def live_among(self, keys: Sequence[str]) -> set[str]:
        return await self._dispatch.live_among(keys)

    async def live_keys_of_schedule(self, schedule: str) -> list[str]:
        return await self._dispatch.live_keys_of_schedule(schedule)

    async def claim(
        self,
        owner: str,
        handlers: Sequence[str],
        count: int,
        lease_ttl: float,
        max_lease_losses: int,
        completing: Sequence[Completion] = (),
        claim_id: str = "",
        limits: Mapping[str, Limits] | None = None,
    ) -> ClaimBatch:
        k = self._keys
        if not self._layout_checked:
            await self._run("upgrade-layout", [k.pending, k.layout, k.running], [k.prefix, LAYOUT],
                            subject=self.pool)
            self._layout_checked = True
        handlers = list(dict.fromkeys(handlers))  # a queue declared twice would be scanned twice
        completions = "" if not completing else orjson.dumps(
            [[c.lease.key, str(c.lease.token), c.result.decode()] for c in completing]).decode()
        sent_at = self._witness.sending()
        since = self._witness.since(sent_at)
        claim_by = claim_deadline(self._witness.store_time(sent_at), lease_ttl)
        answer = await self._witnessed(sent_at, self._claim(
            owner,
            [k.pending, k.running, k.token, k.done("failed"), k.done("stopped"),
             k.write_probe, k.reserved(owner), k.health, k.last_claim(owner), k.epoch,
             *(k.queue(handler) for handler in handlers)],
            [k.prefix, owner, count, milliseconds(lease_ttl), max_lease_losses,
             self._retention_ms, k.channel, completions,
             "" if since is None else milliseconds(since), milliseconds(MIN_FAILING_SPAN),
             milliseconds(MIN_CLAIM_GAP), milliseconds(JUDGE_AFTER_GAP), claim_id,
             "" if claim_by is None else milliseconds(claim_by), limits_arg(limits or {}),
             "0" if self._no_lock_delay else "1", *handlers],
        ))
        self._witness.answered(sent_at, seconds(answer[2]), reported=True, hold=lease_ttl)
        return claim_batch(answer, owner)

    async def renew(
        self,
        owner: str,
        instance: str,
        leases: Sequence[Lease],
        lease_ttl: float,
        stats: dict[str, JobStats],
    ) -> RenewResult:
        k = self._keys
        keys = [k.running, k.seen, k.supervisors, k.health]
        args: list[ScriptArg] = [owner, instance, milliseconds(lease_ttl),
                                 milliseconds(HEALTH_GAP)]
        for lease in leases:
            job_stats = stats.get(lease.key, JobStats())
            keys += [k.job(lease.key), k.notes(lease.key)]
            args += [lease.key, lease.token, _optional(job_stats.pid),
                     _optional(job_stats.rss_bytes), _optional(job_stats.cpu_percent)]
        sent_at = self._witness.sending()
        now, lost, stopping, notified, membership = await self._witnessed(
            sent_at, self._run("renew", keys, args, subject=owner))
        self._witness.answered(sent_at, seconds(now), reported=False)
        return RenewResult(
            lost=_key_tokens(lost),
            stop_requested=frozenset(key.decode() for key in stopping),
            notified=frozenset(key.decode() for key in notified),
            store_time=seconds(now),
            membership=cast(MembershipState, membership.decode()),
        )

    async def complete(self, lease: Lease, result: bytes) -> None:
        await self._ends.complete(lease, result)

    async def fail(self, lease: Lease, error: str, *, final: bool, retry_delay: float) -> JobState:
        return await self._ends.fail(lease, error, final=final, retry_delay=retry_delay)

    async def release(
        self,
        lease: Lease,
        *,
        delay: float = 0.0,
        reserve_for: str | None = None,
        reserve_ttl: float = 0.0,
        reason: str = "",
    ) -> None:
        await self._ends.release(lease, delay=delay, reserve_for=reserve_for,
                                 reserve_ttl=reserve_ttl, reason=reason)

    async def save_checkpoint(self, lease: Lease, value: bytes) -> None:
        await self._ends.save_checkpoint(lease, value)

    async def finish_stopped(self, lease: Lease, reason: str) -> None:
        await self._ends.finish_stopped(lease, reason)

    async def stop(self, key: str, *, fired: FiredTick | None = None) -> JobState:
        return await self._steering.stop(key, fired=fired)

    async def notify(self, key: str, payload: bytes) -> None:
        try:
            await self._notes.notify(key, payload)
        except JobNotFound:
            # The script refuses a finished job as it does an unknown key: say which.
            state = (await self.job(key)).state  # JobNotFound if it is unknown
            if state not in FINISHED_STATES:
                raise
            raise JobNotFound(f"job {key!r} has finished ({state})") from None

    async def take_notifications(self, lease: Lease, after: int = 0) -> list[Note]:
        return await self._notes.take_notifications(lease, after)

    async def ack_notifications(self, lease: Lease, upto: int) -> None:
        await self._notes.ack_notifications(lease, upto)

    async def register(self, info: SupervisorInfo) -> None:
        k = self._keys
        await self._run(
            "register",
            [k.supervisors, k.seen],
            [info.id, info.instance, encode_info(info)],
            subject=info.id,
        )

    async def deregister(self, supervisor_id: str, instance: str) -> None:
        k = self._keys
        await self._run(
            "deregister", [k.supervisors, k.seen], [supervisor_id, instance],
            subject=supervisor_id,
        )

    async def job(self, key: str) -> JobRecord:
        return await self._reads.job(key)

    async def jobs(self, state: JobState | None = None) -> list[JobRecord]:
        return await self._reads.jobs(state)

    async def jobs_page(self, state: JobState | None = None, *, prefix: str = "",
                        after: str = "", limit: int = 50) -> list[JobRecord]:
        return await self._reads.jobs_page(state, prefix=prefix, after=after, limit=limit)

    async def latest_finished(self, state: JobState, limit: int = 20) -> list[JobRecord]:
        return await self._reads.latest_finished(state, limit=limit)

    async def members(self) -> Membership:
        return await self._reads.members()

    async def counts(self) -> dict[str, int]:
        return await self._reads.counts()

    async def snapshot(self) -> PoolSnapshot:
        return await self._reads.snapshot()

    def events(self, supervisor_id: str) -> AbstractAsyncContextManager[AsyncIterator[StoreEvent]]:
        return open_feed(self._client, self._keys.channel, self._keys.doorbell(supervisor_id),
                         where=self._where)

    def job_ends(self, key: str) -> AbstractAsyncContextManager[AsyncIterator[StoreEvent]]:
        return open_feed(self._client, self._keys.ended(key), where=self._where,
                         parse=ended_hint)

    async def retry(self, key: str) -> None:
        await retry_job(self._client, self._keys, self._run, self._where, key)

    async def ping(self) -> None:
        with translated_errors(self._where):
            await self._client.ping()

    async def _master_address(self) -> str | None:
        with translated_errors(self._where):
            return await self._connection.master_address()

    async def close(self) -> None:
        await self._connection.aclose()

    async def _witnessed(self, sent_at: float, call: Awaitable[list[Any]]) -> list[Any]:
        """`call`'s answer; its failure is told to the witness (a claim, a renewal)."""
        try:
            return await call
        except StoreFailure:
            self._witness.failed(sent_at)
            raise

    async def _run(
        self, name: str, keys: Sequence[str], args: Sequence[ScriptArg], *, subject: str
    ) -> list[Any]:
        if self._replicated.waits(name):
            return await self._replicated.run(name, keys, args, subject=subject)
        with translated_errors(self._where):
            return await self._scripts.run(name, keys, args, subject=subject)

    async def _claim(self, owner: str, keys: Sequence[str],
                     args: Sequence[ScriptArg]) -> list[Any]:
        if not self._replicated.replicas:
            return await self._run("claim", keys, args, subject=owner)

        async def release(lease: Lease) -> None:
            await self.release(lease, reason="replicas did not acknowledge the claim")

        return await self._replicated.claim(keys, args, owner=owner, release=release)
