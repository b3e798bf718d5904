"""The SQLite store's steps in a lease's life: claim (start due jobs, recover expired
leases; claim.py runs them), renew, hold, complete, fail, release, finish; each notes
its event in the job's history (sqlite/history.py).  The steps a claim shares are
functions of one `Tx`; `SqliteLeases` (a part of SqliteStore: sqlite/context.py) runs
each of the others as a transaction of its own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from supervisor.core.lease_losses import (
    FailingWindow,
    Recovery,
    WriteGap,
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
from supervisor.store.sqlite import history
from supervisor.store.sqlite import limits as sqlite_limits
from supervisor.store.sqlite.context import SqlitePart
from supervisor.store.sqlite.db import Tx
from supervisor.store.sqlite.records import stats_params

# Due jobs looked at beyond `count` when a handler has limits (a group limit may skip
# some); the Lua claim script looks as far.


def emit(tx: Tx, kind: str, key: str | None = None) -> None:
    tx.run("emit_event", kind=kind, key=key)


def note_claim(tx: Tx) -> WriteGap | None:
    """Note that a claim runs now; the last gap between the pool's claims, this one's
    if it ends one."""
    last = tx.row("claim_gap")
    gap = write_gap(None if last is None else last["last_claim"], tx.boot,
                    min_gap=MIN_CLAIM_GAP)
    tx.run("note_claim", gap_start=gap and gap.start, gap_end=gap and gap.end)
    if gap is None and last is not None and last["gap_start"] is not None:
        gap = WriteGap(last["gap_start"], last["gap_end"])
    return gap


def recover_expired_leases(tx: Tx, max_lease_losses: int, failing: FailingWindow | None,
                           gap: WriteGap | None, lease_ttl: float,
                           ) -> tuple[list[LeaseRecovery], int]:
    """Recover every lease that ran out; `failing`: the window over which the claiming
    supervisor saw the store failing, whose leases' ends are not counted as losses;
    `gap`: the last gap between the pool's claims, whose leases are left to a witness
    for a while (core/lease_losses.py judged_later).  What each recovery did, and how
    many leases were left."""
    expired = tx.rows("expired_leases")
    judged = [row for row in expired
              if not judged_later(row["lease_deadline"], failing, gap, tx.boot,
                                  ttl=lease_ttl, defer=JUDGE_AFTER_GAP)]
    due = tx.value("front_of_queue") if judged else None
    recoveries = []
    for row in judged:
        key = row["key"]
        counted = loss_counts(row["lease_deadline"], failing)
        losses = row["lease_losses"] + counted
        outcome = recovery(losses, stop_requested=bool(row["stop_requested"]),
                           max_losses=max_lease_losses)
        holder = row["supervisor"] or "?"
        recoveries.append(LeaseRecovery(key, holder, counted, losses, outcome.value))
        how = "counted" if counted else "not counted: the store was failing"
        history.note(tx, key, "lease_lost", f"{how} ({losses} in a row); {outcome.value}")
        match outcome:
            case Recovery.STOPPED:
                history.note(tx, key, "stopped", f"stop requested; lease of {holder} expired")
                tx.run("stop_expired_lease", key=key, losses=losses)
            case Recovery.FAILED:
                history.note(tx, key, "failed", f"lease lost {losses} times (limit "
                             f"{max_lease_losses}), last held by {holder}")
                tx.run("fail_expired_lease", key=key, losses=losses,
                       max_lease_losses=max_lease_losses)
            case Recovery.REQUEUED:
                tx.run("requeue_expired_lease", key=key, losses=losses, due=due)
                continue
        tx.run("drop_notes", key=key)
    if judged:
        emit(tx, "wake")
    return recoveries, len(expired) - len(judged)


def claim(tx: Tx, owner: str, handlers: Sequence[str], count: int, lease_ttl: float,
          max_lease_losses: int, failing: FailingWindow | None,
          limits: Mapping[str, Limits]) -> ClaimBatch:
    """A claim's recoveries and starts (Store.claim), with the time until the next due
    job or free rate slot of these handlers."""
    gap = note_claim(tx)
    recoveries, left = recover_expired_leases(tx, max_lease_losses, failing, gap, lease_ttl)
    serves = sqlite_limits.served(tx, handlers)
    jobs = start_due_jobs(tx, owner, serves, count, lease_ttl, limits)
    next_due = tx.value("next_due", handlers=orjson.dumps(list(handlers)).decode())
    waits = [next_due - tx.now] if next_due is not None else []
    if (slot := sqlite_limits.next_slot_in(tx, limits, serves)) is not None:
        waits.append(slot)
    return ClaimBatch(jobs=jobs, recovered=len(recoveries), next_due_in=min(waits, default=None),
                      recoveries=tuple(recoveries), left_to_witness=left)


def start_due_jobs(tx: Tx, owner: str, handlers: Sequence[str], count: int,
                   lease_ttl: float, limits: Mapping[str, Limits]) -> tuple[ClaimedJob, ...]:
    """Up to `count` pending jobs of these handlers -> running: first those reserved
    for `owner`, then due ones, highest priority first and oldest first within one, as
    far as the pool-wide limits allow (core/limits.py startable)."""
    if count <= 0 or not handlers:
        return ()
    handler_list = orjson.dumps(list(handlers)).decode()
    limited = any(not limits.get(handler, Limits()).unlimited for handler in handlers)
    # A group limit may skip jobs: look further down the queue for others.
    scan = count + (GROUP_SCAN if limited else 0)
    rows = tx.rows("reserved_keys", owner=owner, handlers=handler_list, count=scan)
    rows += tx.rows("claimable_keys", handlers=handler_list, count=scan)
    # key -> the deadline of the lease whose expiry put it back, if any (boot clock)
    expired_at = {row["key"]: row["lease_expired_at"] for row in rows}
    due = list({row["key"]: Due(row["key"], row["handler"], row["job_group"])
                for row in rows}.values())
    chosen = startable(due, count, limits, sqlite_limits.usage(tx, limits), tx.boot) \
        if limited else due[:count]
    if not chosen:
        return ()
    sqlite_limits.note_starts(tx, limits, [job.handler for job in chosen])
    first_token = tx.value("take_tokens", n=len(chosen)) - len(chosen) + 1
    started = []
    for token, job in enumerate(chosen, start=first_token):
        row: Any = tx.row("start_attempt", key=job.key, owner=owner, token=token,
                          lease_ttl=lease_ttl)
        history.note(tx, job.key, "started", f"attempt {row['attempts']}")
        started.append(claimed_job(row, owner, tx, expired_at[job.key]))
    return tuple(started)


def held_job(tx: Tx, lease: Lease) -> Any:
    job = tx.row("held_job", key=lease.key, owner=lease.owner, token=lease.token)
    if job is None:
        raise stale(lease)
    return job


def finish(tx: Tx, key: str, state: JobState, error: str | None) -> JobState:
    history.note(tx, key, state, history.first_line(error))
    tx.run("finish_job", key=key, state=state, error=error)
    tx.run("drop_notes", key=key)
    emit(tx, "wake")
    return state


def stale(lease: Lease) -> StaleToken:
    return StaleToken(f"job {lease.key!r}: token {lease.token} of {lease.owner!r} no longer "
                      "holds the lease")


def claimed_job(row: Any, owner: str, tx: Tx, expired_at: float | None) -> ClaimedJob:
    return ClaimedJob(key=row["key"], handler=row["handler"], payload=bytes(row["payload"]),
                      token=row["token"], attempt=row["attempts"],
                      max_attempts=row["max_attempts"],
                      lease_deadline=tx.wall_time(row["lease_deadline"]),
                      owner=owner, has_notes=bool(row["has_notes"]),
                      checkpoint=blob(row["checkpoint"]),
                      lease_expired_at=None if expired_at is None else tx.wall_time(expired_at),
                      traceparent=row["traceparent"], tracestate=row["tracestate"])


def blob(blob: bytes | None) -> bytes | None:
    return None if blob is None else bytes(blob)


def complete(tx: Tx, completion: Completion) -> bool:
    """running -> succeeded with the result; False if the lease is stale.  A job that
    succeeded under this very lease was completed by an earlier try whose reply was
    lost: True, and nothing changes."""
    lease = completion.lease
    history.note(tx, lease.key, "succeeded", lease=lease)
    completed = tx.run("complete_job", key=lease.key, owner=lease.owner, token=lease.token,
                       result=completion.result)
    if completed.rowcount == 0:
        return tx.row("succeeded_under", key=lease.key, owner=lease.owner,
                      token=lease.token) is not None
    tx.run("drop_notes", key=lease.key)
    return True


class SqliteLeases(SqlitePart):
    async def renew(self, owner: str, instance: str, leases: Sequence[Lease], lease_ttl: float,
                    stats: dict[str, JobStats]) -> RenewResult:
        """Extend the leases `owner` still holds, store their stats, and mark the owner
        seen if its membership entry is this instance's (the same step as
        lua/renew-4+2n.lua)."""
        store_boot = 0.0

        def work(tx: Tx) -> RenewResult:
            nonlocal store_boot
            store_boot = tx.boot
            for lease in leases:
                history.note_pid(tx, lease, (stats.get(lease.key) or JobStats()).pid)
            rows = [row for lease in leases for row in tx.rows(
                "renew_lease", key=lease.key, token=lease.token, owner=owner,
                deadline=tx.boot + lease_ttl, reset_after=LOSSES_RESET_TTLS * lease_ttl,
                **stats_params(stats.get(lease.key)))]
            entry = tx.row("supervisor_entry", id=owner)
            membership: MembershipState = "missing"
            if entry is not None:
                membership = "ok" if entry["instance"] == instance else "taken"
            if membership == "ok":
                tx.run("touch_supervisor", id=owner)
            tx.run("touch_health", gap=HEALTH_GAP)
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
        ctx.witness.answered(sent_at, store_boot, reported=False)
        return result

    async def complete(self, lease: Lease, result: bytes) -> None:
        def work(tx: Tx) -> None:
            if not complete(tx, Completion(lease, result)):
                raise stale(lease)

        await self._ctx.db.write(work)

    async def fail(self, lease: Lease, error: str, *, final: bool, retry_delay: float) -> JobState:
        def work(tx: Tx) -> JobState:
            job = held_job(tx, lease)
            if job["stop_requested"]:
                return finish(tx, lease.key, "stopped", error)
            if final or 0 < job["max_attempts"] <= job["attempts"]:
                return finish(tx, lease.key, "failed", error)
            history.note(tx, lease.key, "failed", f"{history.first_line(error)} (will retry)")
            tx.run("requeue_job", key=lease.key, refund=0, error=error, due=tx.now + retry_delay)
            emit(tx, "wake")
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
        def work(tx: Tx) -> None:
            if held_job(tx, lease)["stop_requested"]:
                finish(tx, lease.key, "stopped", f"stop requested; released by {lease.owner}")
                return
            if reserve_for:  # a move: others may claim it once the reservation runs out
                history.note(tx, lease.key, "moved",
                             f"to {reserve_for}: {reason}" if reason else f"to {reserve_for}")
                due = tx.now + max(0.0, reserve_ttl)
            else:
                history.note(tx, lease.key, "released", reason or None)
                due = tx.now + delay if delay > 0 else tx.value("front_of_queue")
            tx.run("requeue_job", key=lease.key, refund=1, error=None, due=due)
            if reserve_for:
                tx.run("reserve_job", key=lease.key, reserved_for=reserve_for,
                       moved_from=lease.owner)
            emit(tx, "wake")

        await self._ctx.db.write(work)

    async def snooze(self, lease: Lease, delay: float) -> JobState:
        def work(tx: Tx) -> JobState:
            if held_job(tx, lease)["stop_requested"]:
                return finish(tx, lease.key, "stopped",
                              f"stop requested; snoozed by {lease.owner}")
            history.note(tx, lease.key, "snoozed", snooze_detail(delay))
            tx.run("snooze_job", key=lease.key, due=tx.now + max(0.0, delay))
            emit(tx, "wake")
            return "pending"

        return await self._ctx.db.write(work)

    async def save_checkpoint(self, lease: Lease, value: bytes) -> None:
        def work(tx: Tx) -> None:
            saved = tx.run("save_checkpoint", key=lease.key, owner=lease.owner,
                           token=lease.token, checkpoint=value)
            if saved.rowcount == 0:
                raise stale(lease)

        await self._ctx.db.write(work)

    async def finish_stopped(self, lease: Lease, reason: str) -> None:
        def work(tx: Tx) -> None:
            held_job(tx, lease)
            finish(tx, lease.key, "stopped", reason)

        await self._ctx.db.write(work)
