"""The SQL stores' steps in a lease's life: claim (start due jobs, recover expired
leases; claim.py runs them), renew, complete, fail, release, finish; each notes its
event in the job's history (history.py).  The steps a claim shares are functions of one
`Tx`; `SqlLeases` (a part of both SQL stores: context.py) runs each of the others as a
transaction of its own.  Where the engines differ (how jobs start and complete, the
claim's reads, the hints), the rule asks its `Tx` (tx.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from supervisor.core.failover import ended_by_failover
from supervisor.core.lease_losses import (
    FailingWindow,
    Recovery,
    WriteGap,
    claim_note_due,
    judged_later,
    loss_counts,
    recovery,
    write_gap,
)
from supervisor.core.limits import Due, Limits, startable
from supervisor.errors import StaleToken
from supervisor.store.policy import (
    GROUP_SCAN,
    HEALTH_GAP,
    JUDGE_AFTER_GAP,
    LOSSES_RESET_TTLS,
    MIN_CLAIM_GAP,
)
from supervisor.store.records import (
    ClaimBatch,
    ClaimedJob,
    Completion,
    JobState,
    JobStats,
    Lease,
    LeaseRecovery,
    MembershipState,
    RenewResult,
    snooze_detail,
)
from supervisor.store.sql import history
from supervisor.store.sql import limits as sql_limits
from supervisor.store.sql.context import SqlPart
from supervisor.store.sql.records import blob, stats_params
from supervisor.store.sql.tx import ClaimContext, Row, Tx


async def note_claim(tx: Tx, last: ClaimContext) -> WriteGap | None:
    """Note that a claim runs now (unless one was noted less than `last.note_every`
    ago); the last gap between the pool's claims, this one's if it ends one."""
    gap = write_gap(last.last_claim, tx.lease_now, min_gap=MIN_CLAIM_GAP)
    if claim_note_due(last.last_claim, tx.lease_now, gap, every=last.note_every):
        await tx.run("note_claim", gap_start=gap and gap.start, gap_end=gap and gap.end)
    if gap is None and last.gap_start is not None and last.gap_end is not None:
        gap = WriteGap(last.gap_start, last.gap_end)
    return gap


async def recover_expired_leases(tx: Tx, expired: Sequence[Row], max_lease_losses: int,
                                 failing: FailingWindow | None, gap: WriteGap | None,
                                 lease_ttl: float, hold_until: float | None = None,
                                 ) -> tuple[list[LeaseRecovery], int]:
    """Recover every lease that ran out (`expired`: the claim's context); what each
    recovery did, and how many leases were left to a witness.  `failing`: the window
    over which the claiming supervisor saw the store failing, whose leases' ends are not
    counted as losses; `gap`: the last gap between the pool's claims, whose leases are
    left to a witness for a while (core/lease_losses.py judged_later).  A lease that
    ended before the hold of a change of primary (`hold_until`) counts no loss
    (core/failover.py)."""
    judged = [row for row in expired
              if not judged_later(row["lease_deadline"], failing, gap, tx.lease_now,
                                  ttl=lease_ttl, defer=JUDGE_AFTER_GAP)]
    due = await tx.value("front_of_queue") if judged else None
    recoveries = []
    for row in judged:
        key = row["key"]
        counted = loss_counts(row["lease_deadline"], failing) and not ended_by_failover(
            row["lease_deadline"], hold_until)
        losses = row["lease_losses"] + counted
        outcome = recovery(losses, stop_requested=bool(row["stop_requested"]),
                           max_losses=max_lease_losses)
        holder = row["supervisor"] or "?"
        recoveries.append(LeaseRecovery(key, holder, counted, losses, outcome.value))
        how = "counted" if counted else "not counted: the store was failing"
        await history.note(tx, key, "lease_lost", f"{how} ({losses} in a row); {outcome.value}")
        match outcome:
            case Recovery.STOPPED:
                await history.note(tx, key, "stopped",
                                   f"stop requested; lease of {holder} expired")
                await tx.run("stop_expired_lease", key=key, losses=losses)
            case Recovery.FAILED:
                await history.note(tx, key, "failed", f"lease lost {losses} times (limit "
                                   f"{max_lease_losses}), last held by {holder}")
                await tx.run("fail_expired_lease", key=key, losses=losses,
                             max_lease_losses=max_lease_losses)
            case Recovery.REQUEUED:
                await tx.run("requeue_expired_lease", key=key, losses=losses, due=due)
                await tx.requeued(row["handler"], due_now=True)
                continue
        await tx.run("drop_notes", key=key)
        await tx.ended(key)
    return recoveries, len(expired) - len(judged)


async def claim(tx: Tx, owner: str, handlers: Sequence[str], count: int, lease_ttl: float,
                max_lease_losses: int, failing: FailingWindow | None,
                limits: Mapping[str, Limits], *, lock_delay: bool = True,
                recover: bool = True) -> ClaimBatch:
    """A claim's recoveries (unless not `recover`) and starts (Store.claim), with the
    time until the next due job or free rate slot of these handlers; a claim that leaves
    room waits for jobs.  After a change of primary, nothing starts until the hold ends
    (postgres/failover.py; `lock_delay` False: a test's switch)."""
    context = await tx.claim_context(lease_ttl, lock_delay=lock_delay, recover=recover)
    if context.held:
        count = 0
    gap = await note_claim(tx, context)
    recoveries, left = await recover_expired_leases(tx, context.expired, max_lease_losses,
                                                    failing, gap, lease_ttl, context.hold_until)
    serves = sql_limits.served(context.paused, handlers)
    jobs = await start_due_jobs(tx, owner, serves, count, lease_ttl, limits)
    # Room left: it waits for jobs.  Full: it waits no more, and passes on the work it
    # left behind.
    room_left = count > len(jobs) and bool(serves)
    next_due = await tx.value("after_claim", owner=owner, serves=list(serves),
                              handlers=list(handlers), waits=room_left,
                              passes_on=not room_left and count > 0)
    waits = [next_due - tx.now] if next_due is not None else []
    if (slot := await sql_limits.next_slot_in(tx, limits, serves)) is not None:
        waits.append(slot)
    return ClaimBatch(jobs=jobs, recovered=len(recoveries), next_due_in=min(waits, default=None),
                      recoveries=tuple(recoveries), left_to_witness=left,
                      held_until=context.hold_until if context.held else None)


async def start_due_jobs(tx: Tx, owner: str, handlers: Sequence[str], count: int,
                         lease_ttl: float, limits: Mapping[str, Limits],
                         ) -> tuple[ClaimedJob, ...]:
    """Up to `count` pending jobs of these handlers -> running: first those reserved
    for `owner`, then due ones, highest priority first and oldest first within one, as
    far as the pool-wide limits allow (core/limits.py startable)."""
    if count <= 0 or not handlers:
        return ()
    if all(limits.get(handler, Limits()).unlimited for handler in handlers):
        rows = await tx.start_due(owner, handlers, count, lease_ttl)
        return tuple(claimed_job(row, owner, tx) for row in rows)
    # A group limit may skip jobs: look further down the queue for others.
    found = {row["key"]: row for row in await tx.due_keys(owner, handlers, count + GROUP_SCAN)}
    due = [Due(row["key"], row["handler"], row["job_group"]) for row in found.values()]
    chosen = startable(due, count, limits, await sql_limits.usage(tx, limits), tx.lease_now)
    if not chosen:
        return ()
    await sql_limits.note_starts(tx, limits, [job.handler for job in chosen])
    rows = await tx.start_jobs([found[job.key] for job in chosen], owner, lease_ttl)
    return tuple(claimed_job(row, owner, tx) for row in rows)


async def held_job(tx: Tx, lease: Lease) -> Any:
    job = await tx.row("held_job", key=lease.key, owner=lease.owner, token=lease.token)
    if job is None:
        raise stale(lease)
    return job


async def finish(tx: Tx, key: str, state: JobState, error: str | None) -> JobState:
    await history.note(tx, key, state, history.first_line(error))
    await tx.run("finish_job", key=key, state=state, error=error)
    await tx.run("drop_notes", key=key)
    await tx.ended(key)
    return state


def stale(lease: Lease) -> StaleToken:
    return StaleToken(f"job {lease.key!r}: token {lease.token} of {lease.owner!r} no longer "
                      "holds the lease")


def claimed_job(row: Row, owner: str, tx: Tx) -> ClaimedJob:
    expired_at = row["lease_expired_at"]
    return ClaimedJob(key=row["key"], handler=row["handler"], payload=bytes(row["payload"]),
                      token=row["token"], attempt=row["attempts"],
                      max_attempts=row["max_attempts"],
                      lease_deadline=tx.wall_time(row["lease_deadline"]),
                      owner=owner, has_notes=bool(row["has_notes"]),
                      checkpoint=blob(row["checkpoint"]),
                      lease_expired_at=None if expired_at is None else tx.wall_time(expired_at),
                      traceparent=row["traceparent"], tracestate=row["tracestate"])


async def complete(tx: Tx, completion: Completion) -> bool:
    """running -> succeeded with the result; False if the lease is stale (Tx.send_completion)."""
    answer = await tx.send_completion(completion)
    return await answer()


class SqlLeases(SqlPart):
    async def renew(self, owner: str, instance: str, leases: Sequence[Lease], lease_ttl: float,
                    stats: dict[str, JobStats]) -> RenewResult:
        """Extend the leases `owner` still holds, store their stats, and mark the owner
        seen if its membership entry is this instance's."""
        store_time = 0.0

        async def work(tx: Tx) -> RenewResult:
            nonlocal store_time
            store_time = tx.lease_now
            rows = []
            for lease in leases:
                await history.note_pid(tx, lease, (stats.get(lease.key) or JobStats()).pid)
                rows += await tx.rows(
                    "renew_lease", key=lease.key, token=lease.token, owner=owner,
                    deadline=tx.lease_now + lease_ttl, reset_after=LOSSES_RESET_TTLS * lease_ttl,
                    **stats_params(stats.get(lease.key)))
            entry = await tx.row("supervisor_entry", id=owner)
            membership: MembershipState = "missing"
            if entry is not None:
                membership = "ok" if entry["instance"] == instance else "taken"
            if membership == "ok":
                await tx.run("touch_supervisor", id=owner)
            await tx.run("touch_health", gap=HEALTH_GAP)
            renewed = {(row["key"], row["token"]) for row in rows}
            return RenewResult(
                lost=frozenset((lease.key, lease.token) for lease in leases
                               if (lease.key, lease.token) not in renewed),
                stop_requested=frozenset(row["key"] for row in rows if row["stop_requested"]),
                notified=frozenset(row["key"] for row in rows if row["notified"]),
                store_time=tx.now,
                membership=membership,
            )

        ctx = self._ctx
        sent_at = ctx.witness.sending()
        result = await ctx.witnessed(sent_at, ctx.db.write(work, first=True))
        ctx.witness.answered(sent_at, store_time, reported=False)
        return result

    async def complete(self, lease: Lease, result: bytes) -> None:
        async def work(tx: Tx) -> None:
            if not await complete(tx, Completion(lease, result)):
                raise stale(lease)

        await self._ctx.db.write(work)

    async def fail(self, lease: Lease, error: str, *, final: bool, retry_delay: float) -> JobState:
        async def work(tx: Tx) -> JobState:
            job = await held_job(tx, lease)
            if job["stop_requested"]:
                return await finish(tx, lease.key, "stopped", error)
            if final or 0 < job["max_attempts"] <= job["attempts"]:
                return await finish(tx, lease.key, "failed", error)
            await history.note(tx, lease.key, "failed",
                               f"{history.first_line(error)} (will retry)")
            await tx.run("requeue_job", key=lease.key, refund=0, error=error,
                         due=tx.now + retry_delay)
            await tx.requeued(job["handler"], due_now=retry_delay <= 0)
            return "pending"

        return await self._ctx.db.write(work)

    async def release(
        self,
        lease: Lease,
        *,
        delay: float = 0.0,
        reserve_for: str | None = None,
        reserve_ttl: float = 0.0,
        reason: str = "",
    ) -> None:
        async def work(tx: Tx) -> None:
            job = await held_job(tx, lease)
            if job["stop_requested"]:
                await finish(tx, lease.key, "stopped",
                             f"stop requested; released by {lease.owner}")
                return
            if reserve_for:  # a move: others may claim it once the reservation runs out
                await history.note(tx, lease.key, "moved",
                                   f"to {reserve_for}: {reason}" if reason else f"to {reserve_for}")
                due = tx.now + max(0.0, reserve_ttl)
            else:
                await history.note(tx, lease.key, "released", reason or None)
                due = tx.now + delay if delay > 0 else await tx.value("front_of_queue")
            await tx.run("requeue_job", key=lease.key, refund=1, error=None, due=due)
            if reserve_for:
                await tx.run("reserve_job", key=lease.key, reserved_for=reserve_for,
                             moved_from=lease.owner)
                await tx.reserved(reserve_for)
            else:
                await tx.requeued(job["handler"], due_now=delay <= 0)

        await self._ctx.db.write(work)

    async def snooze(self, lease: Lease, delay: float) -> JobState:
        async def work(tx: Tx) -> JobState:
            job = await held_job(tx, lease)
            if job["stop_requested"]:
                return await finish(tx, lease.key, "stopped",
                                    f"stop requested; snoozed by {lease.owner}")
            await history.note(tx, lease.key, "snoozed", snooze_detail(delay))
            await tx.run("snooze_job", key=lease.key, due=tx.now + max(0.0, delay))
            await tx.requeued(job["handler"], due_now=delay <= 0)
            return "pending"

        return await self._ctx.db.write(work)

    async def save_checkpoint(self, lease: Lease, value: bytes) -> None:
        async def work(tx: Tx) -> None:
            saved = await tx.row("save_checkpoint", key=lease.key, owner=lease.owner,
                                 token=lease.token, checkpoint=value)
            if saved is None:
                raise stale(lease)

        await self._ctx.db.write(work)

    async def finish_stopped(self, lease: Lease, reason: str) -> None:
        async def work(tx: Tx) -> None:
            await held_job(tx, lease)
            await finish(tx, lease.key, "stopped", reason)

        await self._ctx.db.write(work)
