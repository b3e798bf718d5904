"""The SQLite store: the `Store` contract on one file, for one host.

Several supervisor processes and CLI commands may use the file at once: every state
change is one short `BEGIN IMMEDIATE` transaction (sqlite/db.py), and the store's clocks
are this host's, read inside it.  The SQL lives in sql/queries.sql.

Two clocks.  Lease deadlines and supervisors' last_seen count on CLOCK_BOOTTIME, which
never steps and runs on through a suspend: a step of the wall clock can then neither
expire a live lease (two holders of one job) nor keep a dead one.  What users read
(created_at, started_at, finished_at, the health times) and `due` (when a pending job
becomes claimable) stay on the wall clock: a step only moves when a held-back job
runs, it never runs a job twice.  A delayed job's `run_at` is a wall-clock time the
user chose, so it is due when the wall clock reaches it (`due` = max(now, run_at)),
as a retry backoff is; schedule ticks compare `not_before` with the wall clock too.
Records show boot-clock deadlines as wall-clock times (Tx.wall_time).  The "held 3
ttls" test of `renew` uses started_at, so a step may reset a job's count of lease
losses early, never hand its lease out.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import TypeVar

import anyio
import anyio.to_thread

from supervisor.core.lease_losses import failing_window
from supervisor.core.limits import Limits
from supervisor.errors import (
    DispatchRefused,
    JobNotFound,
    StoreFailure,
)
from supervisor.store.paging import checked_finished, checked_limit
from supervisor.store.policy import (
    HEALTH_GAP,
    LIVE_TTLS,
    MEMBER_GARBAGE_AFTER,
    MIN_FAILING_SPAN,
    claim_deadline,
)
from supervisor.store.records import (
    LIVE_STATES,
    ClaimBatch,
    Completion,
    DispatchRequest,
    FiredTick,
    JobRecord,
    JobState,
    JobStats,
    Lease,
    Membership,
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
from supervisor.store.sqlite import db as sqlite_db
from supervisor.store.sqlite import debug as sqlite_debug
from supervisor.store.sqlite import dispatch as sqlite_dispatch
from supervisor.store.sqlite import history, leases
from supervisor.store.sqlite import limits as sqlite_limits
from supervisor.store.sqlite import notes as sqlite_notes
from supervisor.store.sqlite import output as sqlite_output
from supervisor.store.sqlite import pages as sqlite_pages
from supervisor.store.sqlite import renewal as leases_held
from supervisor.store.sqlite import retry as sqlite_retry
from supervisor.store.sqlite.db import SqliteDatabase, Tx
from supervisor.store.sqlite.events import EventPoller, JobEndPoll
from supervisor.store.sqlite.records import (
    job_record,
    read_counts,
    read_members,
    read_snapshot,
    register,
)
from supervisor.store.sqlite.schema import BUSY_RETRY_PAUSES, BUSY_TIMEOUT_MS, open_connection
from supervisor.store.witness import FailureWitness

EVENT_KEEP_SECONDS = sqlite_dispatch.EVENT_KEEP_SECONDS
# A failed write that took longer than SQLite's own waits for a lock: this process stalled.
STALLED_AFTER = BUSY_TIMEOUT_MS / 1000 + sum(BUSY_RETRY_PAUSES) + 1.0
_T = TypeVar("_T")


class SqliteStore:
    def __init__(self, db: SqliteDatabase, pool: str, retention: float) -> None:
        self.pool = pool
        self._db = db
        self._retention = retention
        # Lease deadlines count on the boot clock: so does what this process saw failing.
        self._witness = FailureWitness(lambda: sqlite_db.boot_clock(), max_wait=STALLED_AFTER)

    @classmethod
    async def open(cls, url: str, pool: str, retention: float = 86400.0) -> SqliteStore:
        conn, path = await anyio.to_thread.run_sync(
            open_connection, url, pool, sqlite_db.read_clocks)
        return cls(SqliteDatabase(conn, path, pool), pool, retention)

    async def dispatch(self, request: DispatchRequest) -> None:
        (refused,) = await self.dispatch_each([request])
        if refused is not None:
            raise refused

    async def dispatch_many(
        self, requests: Sequence[DispatchRequest], *, fired: FiredTick | None = None
    ) -> list[bool]:
        return [refused is None for refused in await self.dispatch_each(requests, fired=fired)]

    async def dispatch_each(
        self, requests: Sequence[DispatchRequest], *, fired: FiredTick | None = None
    ) -> list[DispatchRefused | None]:
        if not requests:
            return []

        def work(tx: Tx) -> list[DispatchRefused | None]:
            sqlite_dispatch.check_current(tx, fired)
            return sqlite_dispatch.dispatch_each(tx, requests, self._cutoff(tx))

        return await self._db.write(work)

    async def pause(self, handlers: Sequence[str] = ()) -> None:
        await self._db.write(lambda tx: sqlite_limits.pause(tx, handlers))

    async def resume(self, handlers: Sequence[str] = ()) -> None:
        await self._db.write(lambda tx: sqlite_limits.resume(tx, handlers))

    async def paused(self) -> Paused:
        return await self._db.read(sqlite_limits.paused)

    async def starts_within(self, handler: str, period: float) -> tuple[float, list[float]]:
        return await self._db.read(lambda tx: sqlite_limits.starts_within(tx, handler, period))

    async def request_stacks(self, key: str) -> str:
        return await self._db.write(lambda tx: sqlite_debug.request_stacks(tx, key))

    async def answer_stacks(self, request: str, answer: bytes) -> None:
        await self._db.write(lambda tx: sqlite_debug.answer_stacks(tx, request, answer))

    async def stacks_answer(self, request: str, timeout: float) -> bytes | None:
        return await sqlite_debug.stacks_answer(self._db, request, timeout)

    async def append_output(self, lease: Lease, attempt: int, data: bytes, *, at: int,
                            max_bytes: int, ended: bool = False) -> None:
        await self._db.write(lambda tx: sqlite_output.append(
            tx, lease, attempt, data, at=at, max_bytes=max_bytes, ended=ended,
            cutoff=self._cutoff(tx)))

    async def output(self, key: str, offsets: Mapping[int, int] | None = None
                     ) -> list[RunOutput]:
        return await self._db.read(
            lambda tx: sqlite_output.read(tx, key, offsets or {}, self._cutoff(tx)))

    async def set_max_pending(self, limit: int | None) -> None:
        await self._db.write(lambda tx: tx.run("set_max_pending", max_pending=limit))

    async def fire_tick(self, request: TickRequest) -> TickResult:
        return await self._db.write(
            lambda tx: sqlite_dispatch.fire_tick(tx, request, self._cutoff(tx)))

    async def record_tick_outcome(self, fired: FiredTick, outcome: str, detail: bytes) -> bool:
        return await self._db.write(
            lambda tx: sqlite_dispatch.record_tick_outcome(tx, fired, outcome, detail))

    async def schedules(self) -> ScheduleBook:
        return await self._db.read(sqlite_dispatch.read_schedules)

    async def live_among(self, keys: Sequence[str]) -> set[str]:
        def work(tx: Tx) -> set[str]:
            return {key for key in keys if tx.value("job_state", key=key, cutoff=0.0)
                    in LIVE_STATES}

        return await self._db.read(work)

    async def live_keys_of_schedule(self, schedule: str) -> list[str]:
        def work(tx: Tx) -> list[str]:
            return [row["key"] for row in tx.rows("live_keys_of_schedule",
                                                  schedule=schedule)]

        return await self._db.read(work)

    async def claim(self, owner: str, handlers: Sequence[str], count: int, lease_ttl: float,
                    max_lease_losses: int, completing: Sequence[Completion] = (),
                    claim_id: str = "", limits: Mapping[str, Limits] | None = None,
                    ) -> ClaimBatch:
        limits = limits or {}
        sent_at = self._witness.sending()
        since = self._witness.since(sent_at)
        claim_by = claim_deadline(self._witness.store_time(sent_at), lease_ttl)
        store_boot = 0.0

        def work(tx: Tx) -> ClaimBatch:
            nonlocal store_boot
            store_boot = tx.boot
            completed = tuple(leases.complete(tx, completion) for completion in completing)
            tx.run("drop_expired_records", cutoff=self._cutoff(tx))
            tx.run("trim_events", cutoff=tx.now - EVENT_KEEP_SECONDS)
            late = claim_by is not None and tx.boot > claim_by
            batch = leases.claim(
                tx, owner, handlers, 0 if late else count, lease_ttl, max_lease_losses,
                failing_window(since, tx.boot, min_span=MIN_FAILING_SPAN), limits)
            return dataclasses.replace(batch, completed=completed)

        batch = await self._witnessed(sent_at, self._db.write(work))
        self._witness.answered(sent_at, store_boot, reported=True, hold=lease_ttl)
        return batch

    async def _witnessed(self, sent_at: float, call: Awaitable[_T]) -> _T:
        """`call`'s answer; its failure is told to the witness (a claim, a renewal)."""
        try:
            return await call
        except StoreFailure:
            self._witness.failed(sent_at)
            raise

    async def renew(self, owner: str, instance: str, leases: Sequence[Lease], lease_ttl: float,
                    stats: dict[str, JobStats]) -> RenewResult:
        store_boot = 0.0

        def work(tx: Tx) -> RenewResult:
            nonlocal store_boot
            store_boot = tx.boot
            return leases_held.renew(tx, owner, instance, leases, lease_ttl, stats)

        sent_at = self._witness.sending()
        result = await self._witnessed(sent_at, self._db.write(work))
        self._witness.answered(sent_at, store_boot, reported=False)
        return result

    async def complete(self, lease: Lease, result: bytes) -> None:
        def work(tx: Tx) -> None:
            if not leases.complete(tx, Completion(lease, result)):
                raise leases.stale(lease)

        await self._db.write(work)

    async def fail(self, lease: Lease, error: str, *, final: bool, retry_delay: float) -> JobState:
        return await self._db.write(
            lambda tx: leases.fail(tx, lease, error, final=final, retry_delay=retry_delay))

    async def release(
        self,
        lease: Lease,
        *,
        delay: float = 0.0,
        reserve_for: str | None = None,
        reserve_ttl: float = 0.0,
        reason: str = "",
    ) -> None:
        await self._db.write(lambda tx: leases.release(
            tx, lease, delay=delay, reserve_for=reserve_for, reserve_ttl=reserve_ttl,
            reason=reason))

    async def save_checkpoint(self, lease: Lease, value: bytes) -> None:
        def work(tx: Tx) -> None:
            saved = tx.run("save_checkpoint", key=lease.key, owner=lease.owner,
                           token=lease.token, checkpoint=value)
            if saved.rowcount == 0:
                raise leases.stale(lease)

        await self._db.write(work)

    async def finish_stopped(self, lease: Lease, reason: str) -> None:
        def work(tx: Tx) -> None:
            leases.held_job(tx, lease)
            leases.finish(tx, lease.key, "stopped", reason)

        await self._db.write(work)

    async def stop(self, key: str, *, fired: FiredTick | None = None) -> JobState:
        def work(tx: Tx) -> JobState:
            sqlite_dispatch.check_current(tx, fired)
            state: JobState | None = tx.value("job_state", key=key, cutoff=self._cutoff(tx))
            if state is None:
                raise JobNotFound(f"no job has the key {key!r}")
            if state not in LIVE_STATES:
                return state
            if state == "running" and not tx.value("stop_requested", key=key):
                history.note(tx, key, "stopping", "stop")
            tx.run("request_stop", key=key)
            leases.emit(tx, "stop", key)
            if state == "pending":
                return leases.finish(tx, key, "stopped", "stopped before it ran")
            return state

        return await self._db.write(work)

    async def retry(self, key: str) -> None:
        await self._db.write(lambda tx: sqlite_retry.retry_job(tx, key, self._cutoff(tx)))

    async def notify(self, key: str, payload: bytes) -> None:
        await self._db.write(lambda tx: sqlite_notes.notify(tx, key, payload, self._cutoff(tx)))

    async def take_notifications(self, lease: Lease, after: int = 0) -> list[Note]:
        return await self._db.read(lambda tx: sqlite_notes.take(tx, lease, after))

    async def ack_notifications(self, lease: Lease, upto: int) -> None:
        await self._db.write(lambda tx: sqlite_notes.acknowledge(tx, lease, upto))

    async def register(self, info: SupervisorInfo) -> None:
        await self._db.write(lambda tx: register(tx, info, self.pool))

    async def deregister(self, supervisor_id: str, instance: str) -> None:
        await self._db.write(
            lambda tx: tx.run("delete_supervisor", id=supervisor_id, instance=instance))

    async def job(self, key: str) -> JobRecord:
        def work(tx: Tx) -> JobRecord:
            row = tx.row("job_record", key=key, cutoff=self._cutoff(tx))
            if row is None:
                raise JobNotFound(f"no job has the key {key!r}")
            return job_record(row, tx, history.of_job(tx, key))

        return await self._db.read(work)

    async def jobs(self, state: JobState | None = None) -> list[JobRecord]:
        def work(tx: Tx) -> list[JobRecord]:
            tx.run("drop_expired_records", cutoff=self._cutoff(tx))
            rows = tx.rows("all_jobs") if state is None else tx.rows("jobs_in_state",
                                                                      state=state)
            events = history.of_jobs(tx, [row["key"] for row in rows])
            return [job_record(row, tx, events.get(row["key"], ())) for row in rows]

        return await self._db.write(work)

    async def jobs_page(self, state: JobState | None = None, *, prefix: str = "",
                        after: str = "", limit: int = 50) -> list[JobRecord]:
        checked_limit(limit)  # before the worker thread: a caller's error, not the store's
        return await self._db.read(lambda tx: sqlite_pages.jobs_page(
            tx, state, prefix=prefix, after=after, limit=limit, cutoff=self._cutoff(tx)))

    async def latest_finished(self, state: JobState, limit: int = 20) -> list[JobRecord]:
        checked_finished(state)
        checked_limit(limit)
        return await self._db.read(lambda tx: sqlite_pages.latest_finished(
            tx, state, limit=limit, cutoff=self._cutoff(tx)))

    async def members(self) -> Membership:
        return await self._db.read(read_members)

    async def counts(self) -> dict[str, int]:
        return await self._db.read(lambda tx: read_counts(tx, self._cutoff(tx)))

    async def snapshot(self) -> PoolSnapshot:
        def tidy(tx: Tx) -> None:
            tx.run("drop_expired_records", cutoff=self._cutoff(tx))
            tx.run("drop_silent_supervisors", live_ttls=LIVE_TTLS,
                   garbage_after=MEMBER_GARBAGE_AFTER)
            tx.run("touch_health", gap=HEALTH_GAP)

        error = None
        try:
            await self._db.write(tidy)
        except StoreFailure as exc:  # a file that takes no writes may still be read
            error = exc.message
        return await self._db.read(
            lambda tx: read_snapshot(tx, self.pool, self._cutoff(tx), error))

    def events(
        self, supervisor_id: str,
    ) -> contextlib.AbstractAsyncContextManager[AsyncIterator[StoreEvent]]:
        return self._subscribe()

    @contextlib.asynccontextmanager
    async def job_ends(self, key: str) -> AsyncIterator[AsyncIterator[StoreEvent]]:
        yield JobEndPoll()

    @contextlib.asynccontextmanager
    async def _subscribe(self) -> AsyncIterator[AsyncIterator[StoreEvent]]:
        after = await self._db.read(lambda tx: int(tx.value("last_event_id")))
        yield EventPoller(self._db, after)

    async def ping(self) -> None:
        await self._db.read(lambda tx: tx.value("ping"))

    async def close(self) -> None:
        await self._db.close()

    def _cutoff(self, tx: Tx) -> float:
        """Finished records older than this are gone."""
        return tx.now - self._retention
