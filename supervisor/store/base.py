"""The store contract: high-level, atomic operations on jobs, leases and membership.

Every store (Redis, SQLite) implements `Store` with exactly these semantics, and one
conformance suite (tests/store) runs against each.  No driver types cross this
boundary: drivers' errors become `StoreUnavailable`, and status codes become
`JobExists`, `JobNotFound` and `StaleToken`.

Time: every lease deadline and every timestamp written by a store comes from the
store's own clock (Redis TIME, SQLite's host clock), never from the caller's.  All
times are Unix epoch seconds as floats.

Job states: pending, running, succeeded, failed, stopped.  "Live" means pending or
running.  Finished records (succeeded, failed, stopped) are kept for `retention`
seconds, then dropped; a finished key may be dispatched again.

Tokens come from one counter per pool that only grows, so a token is strictly greater
than every earlier token of the same key, across re-dispatches too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from supervisor.core.limits import Limits
from supervisor.errors import DispatchRefused
from supervisor.store.records import (
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


class Store(Protocol):
    pool: str
    # Claims of one owner in flight at once that pay (`claim`'s `lane`s): 2 on Redis,
    # where one claim's round trip overlaps the other's; 1 on the SQL stores, whose
    # writes run one after another, so that a second claim would only wait for the
    # first and split its batch into two transactions (measured: 24% more of
    # PostgreSQL's CPU per job with 16 supervisors).
    claim_lanes: int

    # --- Dispatch and schedules: redis/dispatch.py, sql/dispatch.py

    async def dispatch(self, request: DispatchRequest) -> JobRecord:
        """Create a pending job, claimable from max(store time, `run_at`), and return its
        record.  Raises `JobExists` if the key is live.  A finished record of the key is
        replaced; notifications left from it are dropped."""

    async def dispatch_many(
        self, requests: Sequence[DispatchRequest], *, fired: FiredTick | None = None
    ) -> list[bool]:
        """Dispatch each request as `dispatch` does, atomically per call: True where the job
        was created, False where its key was already live (left as it was). Callers send
        chunks of at most DISPATCH_CHUNK (500) requests; one round trip per call on Redis.
        A key given twice in one call: the first request wins, the second gets False.
        With `fired` (a producer's plan), only while that tick is current, in the same
        atomic step; otherwise nothing changes and `StaleTick` is raised."""

    async def dispatch_each(
        self, requests: Sequence[DispatchRequest]
    ) -> list[DispatchRefused | None]:
        """`dispatch_many`, saying why a request was refused: None where the job was
        added, else `JobExists` (live, or finished within the request's `unique_for`)
        or `PoolFull` (the pool holds `max_pending` pending jobs)."""

    async def fire_tick(self, request: TickRequest) -> TickResult:
        """One atomic step.  If the schedule ended (`record_tick_outcome` with `end`) and
        request.fingerprint is the record's: nothing changes, "ended"; with another
        fingerprint (its definition changed) the end is cleared and the schedule goes on
        as below.  If request.not_before > store time: nothing changes, "early".
        If the schedule's last fired tick >= request.tick: nothing changes, "taken"
        (unless it is request.tick and its outcome is RELEASED: it fires again).
        If request.basis (the last tick its `missed` was counted from, None: never fired)
        is not the record's last tick (both absent: equal; compared as numbers): nothing
        changes, "stale" (another supervisor fired a tick since the caller read the
        record; the caller decides again from the returned last_tick).  A request without
        a basis (UNCHECKED, a caller from before it) is not checked.
        Otherwise record the tick as fired (last_tick, fingerprint, fired_by = owner,
        fired_at = store time, fires + 1, missed + request.missed) and:
        with a dispatch request: create the job as `dispatch` would, outcome "dispatched";
        or, if its key is live, leave it and count skipped + 1, outcome "skipped";
        without one (a producer's tick, run by the caller afterwards): outcome "fired".
        The record's outcome/detail become that outcome (detail: the job key, or None)."""

    async def record_tick_outcome(self, fired: FiredTick, outcome: str, detail: bytes, *,
                                  end: bool = False) -> bool:
        """Set the schedule's last outcome and detail (JSON text), only while `fired` is
        current (a producer's plan applied, the error it raised, or RELEASED: given back
        unapplied); whether it was.  With `end` (the plan ended its schedule), in the
        same step: ended_at = store time, ended_tick = fired.tick."""

    async def schedules(self) -> ScheduleBook:
        """Every schedule record of the pool, with the store time of the read.  Read-only,
        and works while Redis refuses writes (like snapshot)."""

    async def live_keys_of_schedule(self, schedule: str) -> list[str]:
        """Keys of the live (pending or running) jobs whose `schedule` is this one,
        sorted."""

    async def live_among(self, keys: Sequence[str]) -> set[str]:
        """Those of `keys` whose jobs are live; reads their states only.  Read-only."""

    # --- Claim: redis/claim.py, sql/claim.py

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
        only_completing: bool = False,
        lane: int = 0,
        recover: bool = True,
    ) -> ClaimBatch:
        """With `only_completing` (and `count` 0), only the completions, as below: no
        recovery, and no note of the claim or of who waits for work; `claim_id` is
        ignored (the completions, sent again, store once).
        An owner has up to `claim_lanes` claims in flight, one per `lane` (from 0).  A claim sent
        again with the `claim_id` of the owner's last claim in its lane, because its
        reply was lost, changes nothing: it answers the jobs that claim handed out and
        the owner still holds, and whether it completed its jobs (Redis; a SQLite
        transaction's answer is never lost, and it ignores the id).
        With `completing`, first `complete` each of those jobs, in the same atomic step
        (one round trip on Redis); a stale lease there is reported in `completed` and the
        claim goes on.
        Then, unless not `recover` (the claimer recovers once a poll interval, not
        at every claim), recover expired leases of the whole pool: each expired running job
        goes back to pending without spending an attempt and with `lease_losses` + 1,
        keeping the expired deadline, which its next claim hands out as
        `ClaimedJob.lease_expired_at` and clears;
        if a stop was requested for it, it ends `stopped` instead; if `lease_losses`
        reaches `max_lease_losses` it ends `failed` with an error that says so.
        Then move up to `count` claimable pending jobs (handler in `handlers`) to
        running: first those released for `owner` whose reservation has not run out,
        then those due now, highest priority first and oldest first within one (a job
        reserved for another supervisor is due when its reservation runs out); owner, a
        new token, attempt + 1, lease deadline = store time + `lease_ttl`, started_at =
        store time, and the reservation fields cleared.  `count` may be 0 (recovery
        only).  No job of a paused handler starts (none while the pool is paused), nor
        one that would take its handler past its pool-wide `limits`
        (core/limits.py startable): the limits are checked and the start counted in the
        same atomic step."""

    # --- Leases, from renewal to their end: redis/leases.py, sql/leases.py

    async def renew(
        self,
        owner: str,
        instance: str,
        leases: Sequence[Lease],
        lease_ttl: float,
        stats: dict[str, JobStats],
    ) -> RenewResult:
        """In one round trip: extend every lease whose job is running with this owner
        and token to store time + `lease_ttl`, store its stats, and mark the owner as
        seen if its membership entry is this `instance`'s.  Leases that do not match
        change nothing and come back in `lost`.  A job that has held this lease for
        3 x `lease_ttl` or more has its `lease_losses` reset to 0 (losses count only
        in a row)."""

    async def complete(self, lease: Lease, result: bytes) -> None:
        """running -> succeeded with the result JSON.  Raises `StaleToken` unless the
        job is running under this lease, or already succeeded under it (an earlier try
        whose reply was lost: then nothing changes)."""

    async def fail(self, lease: Lease, error: str, *, final: bool, retry_delay: float) -> JobState:
        """Fail the attempt.  Unless `final` or attempts >= max_attempts (> 0), back to
        pending, claimable `retry_delay` seconds from now, and returns "pending";
        otherwise "failed".  The error is recorded either way.  If a stop was
        requested, ends "stopped" instead.  Raises `StaleToken` as `complete`."""

    async def release(
        self,
        lease: Lease,
        *,
        delay: float = 0.0,
        reserve_for: str | None = None,
        reserve_ttl: float = 0.0,
        reason: str = "",
    ) -> None:
        """running -> pending without spending the attempt (attempts - 1), claimable at
        once, ahead of newer jobs; with `delay` > 0, claimable `delay` seconds from
        now instead.  With `reserve_for` (a move; `delay` then does not apply):
        claimable at once by that supervisor only (its claims take reserved jobs
        first, if it runs their handler), and by any other only `reserve_ttl` seconds
        from now; the record shows `reserved_for`,
        `reserved_until` and `moved_from` (the releasing owner) until it is claimed.
        If a stop was requested, ends `stopped` instead.  The history shows `released`
        with `reason` (a move: `moved`, naming the target).  Raises `StaleToken` as
        `complete`."""

    async def snooze(self, lease: Lease, delay: float) -> JobState:
        """The handler asked to run again later (`sandbox.Snooze`): running -> pending
        without spending the attempt (attempts - 1) and with `snoozes` + 1, claimable
        `delay` (>= 0) seconds from now by the store's clock, behind the jobs due before
        then; one supervisor waiting for work is woken when `delay` is 0.  The history
        shows `snoozed` with `snooze_detail(delay)`.  If a stop was requested, ends
        "stopped" instead.  Returns the state after the call.  Raises `StaleToken` as
        `complete`."""

    async def save_checkpoint(self, lease: Lease, value: bytes) -> None:
        """Keep `value` (JSON text) as the job's checkpoint, with the store time as
        `checkpoint_at`; every later attempt of the key gets it in `ClaimedJob`.  A new
        dispatch of the key starts without one.  Raises `StaleToken` as `complete`."""

    async def finish_stopped(self, lease: Lease, reason: str) -> None:
        """running -> stopped, after the job's processes are gone.  Raises `StaleToken`
        as `complete`."""

    # --- Steering the pool: redis/steering.py, sql/steering.py

    async def stop(self, key: str, *, fired: FiredTick | None = None) -> JobState:
        """Ask for a stop.  pending -> stopped at once; running -> stop requested (the
        owner stops it and calls `finish_stopped`), returns "running"; a finished job
        is left as it is.  Returns the state after the call.  Raises `JobNotFound`.
        With `fired` (a producer's plan), only while that tick is current, in the same
        atomic step; otherwise nothing changes and `StaleTick` is raised."""

    async def pause(self, handlers: Sequence[str] = ()) -> None:
        """No claim starts jobs of `handlers` (none named: of the pool) from now on,
        until `resume`; running jobs go on."""

    async def resume(self, handlers: Sequence[str] = ()) -> None:
        """Undo `pause` of those names (a pause of the pool and of a handler are kept
        apart: resuming the pool leaves a paused handler paused) and wake claimers."""

    async def paused(self) -> Paused: ...

    async def starts_within(self, handler: str, period: float) -> tuple[float, list[float]]:
        """The store time now, and the store times of the starts of `handler` (a
        rate-limited one; the others' starts are not kept) within the last `period`."""

    async def set_max_pending(self, limit: int | None) -> None:
        """From now on dispatch refuses jobs while `limit` are pending (None: no
        limit).  Supervisors set it from `[pool] max_pending` as they start."""

    # --- Retry: redis/retry.py, sql/retry.py

    async def retry(self, key: str) -> None:
        """A failed or stopped job -> pending, claimable at once, with its handler,
        payload, max_attempts and checkpoint: attempts and lease losses from 0, the
        error, result, stop request and finish time cleared (a new claim gives it a new
        token, as always).  Raises `JobExists` if the key is live, `DispatchRefused`
        if it succeeded (dispatch it again to run it anew), `JobNotFound` if unknown."""

    # --- Notifications: redis/notes.py, sql/notes.py

    async def notify(self, key: str, payload: bytes) -> None:
        """Queue a message for the job (kept until it runs).  Raises `JobNotFound`;
        a finished job raises `JobNotFound` too."""

    async def take_notifications(self, lease: Lease, after: int = 0) -> list[Note]:
        """The queued messages of a job this lease holds whose seq is above `after`,
        oldest first.  Nothing is removed: a message stays until acknowledged, so a
        run that ends before its handler took it leaves it to the next run.  A lease
        not held gets []."""

    async def ack_notifications(self, lease: Lease, upto: int) -> None:
        """Remove the job's messages with seq <= `upto` (the handler has taken them).
        Does nothing for a lease not held."""

    # --- Output: redis/output.py, sql/output.py

    async def append_output(self, lease: Lease, attempt: int, data: bytes, *, at: int,
                            max_bytes: int, ended: bool = False) -> None:
        """Keep `data`, what the run of `lease` (attempt `attempt`) printed from byte `at`
        of its output on, as `output` shows it: the newest `max_bytes` bytes of the run,
        the older ones cut off (the store may keep up to `output_slack(max_bytes)` more
        until it trims).  Bytes before `at` that the store does not have are counted as
        printed and not kept (the supervisor dropped them); bytes it already has (a
        write sent again) are skipped, so that a write may be repeated.  `ended`: the
        run's last output.  Taken for a run of the job's current dispatch whether or
        not its lease still holds (a fenced run's tail is worth reading), and kept as
        long as the record, with which it goes; raises `StaleToken` for a run the store
        does not know as one of the current dispatch (the key was dispatched again) and
        `JobNotFound` when the record is gone."""

    async def output(self, key: str, offsets: Mapping[int, int] | None = None
                     ) -> list[RunOutput]:
        """What each run of the job's current dispatch printed, oldest run first: the
        kept bytes of run T from byte `offsets[T]` on (0 if absent).  A run appears
        once it wrote output.  Raises `JobNotFound`."""

    # --- Membership: redis/membership.py, sql/membership.py

    async def register(self, info: SupervisorInfo) -> None:
        """Add or refresh the supervisor's membership entry and mark it seen.  Raises
        `SupervisorIdTaken` if another instance with this id was seen within its
        `lease_ttl`."""

    async def deregister(self, supervisor_id: str, instance: str) -> None:
        """Remove the entry if it is still this instance's."""

    # --- Reads: redis/reads.py, sql/reads.py

    async def job(self, key: str) -> JobRecord:
        """One record, with its history (`events`, the newest HISTORY_LIMIT, oldest
        first): every change of the job above writes its event in the same atomic
        step; a new dispatch of the key starts a new history.  Raises `JobNotFound`."""

    async def jobs(self, state: JobState | None = None) -> list[JobRecord]:
        """Every retained record, or those in one state, oldest first."""

    async def jobs_page(self, state: JobState | None = None, *, prefix: str = "",
                        after: str = "", limit: int = 50) -> list[JobRecord]:
        """Up to `limit` retained records (in `state`, or in any), without their events,
        whose key starts with `prefix` (plain characters, no patterns) and sorts after
        `after`, ordered by key (code point order): one page of a listing, which the
        next call continues with `after` = the page's last key.  Never reads the records
        of other pages (SQLite: the (pool, key) index; Redis: the state's key set is
        scanned, filtered by prefix in Redis, then only the page's records are read).
        A page can come back short of `limit` only at the end, or when jobs changed
        state in between.  Raises `ValueError` for a `limit` below 1."""

    async def latest_finished(self, state: JobState, limit: int = 20) -> list[JobRecord]:
        """The `limit` retained records that finished last in `state` (succeeded, failed
        or stopped), newest first, without their events: what a dashboard refreshes,
        at a cost that does not grow with the pool.  Raises `ValueError` for another
        state or a `limit` below 1."""

    async def members(self) -> Membership:
        """Supervisors seen within 3 x their lease_ttl, with the running jobs each holds
        per handler and the jobs reserved for each: one cheap read, done by every
        supervisor every few seconds to plan moves.  Read-only."""

    async def counts(self) -> dict[str, int]:
        """Jobs per state (every state, 0 included; finished records past the retention
        period left out): one cheap read, done every few seconds for metrics.  Read-only,
        and works while Redis refuses writes."""

    async def pending_by_handler(self, handlers: Sequence[str]) -> dict[str, int]:
        """The pending jobs of each of `handlers` (0 included; delayed, snoozed and
        reserved ones are pending too), for `poolsup_jobs{state="pending",handler=...}`
        (what an autoscaler such as KEDA reads): one cheap read, every few seconds.
        Read-only."""

    async def snapshot(self) -> PoolSnapshot:
        """Supervisors seen within 3 x their lease_ttl (as `members`), counts per state,
        running jobs (a store may leave out their payload, result, error and events,
        which `status` does not show: Redis does), moving jobs (pending with a
        live reservation; these records without their events), and the store's health.
        Works while the store refuses writes (health then says "failing"); never removes
        a supervisor's entry that may still be live."""

    # --- Debug: redis/debug.py, sql/debug.py

    async def request_stacks(self, key: str) -> str:
        """Ask the supervisor that runs `key` for its thread stacks (`poolsup debug`), by
        an event it listens to; the request's id, for `stacks_answer`."""

    async def answer_stacks(self, request: str, answer: bytes) -> None:
        """The answer (JSON) to a `request_stacks`, kept a minute."""

    async def stacks_answer(self, request: str, timeout: float) -> bytes | None:
        """The answer to `request`, waited for up to `timeout` seconds (None if none
        came)."""

    # --- Events and the connection: each backend's store.py (and events.py)

    def events(self, supervisor_id: str) -> AbstractAsyncContextManager[AsyncIterator[StoreEvent]]:
        """Subscribe to the change hints for one supervisor: wake (a job it may claim, or
        anything after a resume), and stop KEY, notify KEY and debug for the jobs it holds."""

    def job_ends(self, key: str) -> AbstractAsyncContextManager[AsyncIterator[StoreEvent]]:
        """Hints (`wake`) that the job may have ended: read its record after entering
        (no hint comes for an end before that) and again at each hint.  On Redis a hint
        comes when a script ends the job, and after a lost connection comes back; a
        hint may still be lost, so readers also read now and then.  On SQLite, a hint
        every `sqlite.events.JOB_END_POLL` seconds."""

    async def ping(self) -> None:
        """Raise `StoreUnavailable` if the store cannot be reached."""

    async def close(self) -> None: ...
