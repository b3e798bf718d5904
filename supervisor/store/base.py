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

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

JobState = Literal["pending", "running", "succeeded", "failed", "stopped"]
MembershipState = Literal["ok", "missing", "taken"]
LIVE_STATES: frozenset[str] = frozenset({"pending", "running"})
FINISHED_STATES: frozenset[str] = frozenset({"succeeded", "failed", "stopped"})
ALL_STATES: tuple[JobState, ...] = ("pending", "running", "succeeded", "failed", "stopped")
# Callers of `dispatch_many` send at most this many requests per call.
DISPATCH_CHUNK = 500


@dataclass(frozen=True, kw_only=True)
class DispatchRequest:
    """A new job.  `payload` is the JSON text, already validated by the caller.
    `max_attempts` 0 means "the handler's max_attempts": the supervisor applies it."""

    key: str
    handler: str
    payload: bytes
    max_attempts: int
    # Epoch seconds: not claimable before this time by the store's clock; a time in the
    # past means at once.
    run_at: float | None = None
    # The schedule that started the job (for producers' stop_others); None by hand.
    schedule: str | None = None


@dataclass(frozen=True)
class Lease:
    """The right to run one job: who holds it and with which fencing token."""

    key: str
    token: int
    owner: str


@dataclass(frozen=True, kw_only=True)
class ClaimedJob:
    """A job handed to one supervisor by `claim`."""

    key: str
    handler: str
    payload: bytes
    token: int
    attempt: int
    max_attempts: int
    lease_deadline: float
    owner: str
    has_notes: bool = False  # notifications were queued while it was pending
    checkpoint: bytes | None = None  # JSON text an earlier attempt saved, if any
    # The deadline of the lease whose expiry put the job back to pending (store clock),
    # if that is how it became claimable; None after a dispatch, retry, release or move.
    # The attempt started at lease_deadline - the claim's lease_ttl.
    lease_expired_at: float | None = None

    @property
    def lease(self) -> Lease:
        return Lease(self.key, self.token, self.owner)


@dataclass(frozen=True)
class Completion:
    """A job's result, stored by the `claim` that fills the slot its job freed."""

    lease: Lease
    result: bytes


@dataclass(frozen=True, kw_only=True)
class ClaimBatch:
    """What one `claim` call did.

    `next_due_in`: seconds until the earliest pending job of the claimed handlers held
    back by retry backoff, by its `run_at`, or by a reservation for another supervisor,
    becomes claimable (None if there is none), so the claimer knows when to look again.
    `completed`: for a claim given a `Completion`, whether its result was stored (False:
    the lease was stale, as `complete` would have raised); None for any other claim.
    """

    jobs: tuple[ClaimedJob, ...]
    recovered: int
    next_due_in: float | None
    completed: bool | None = None


@dataclass(frozen=True, kw_only=True)
class JobStats:
    """What the owning supervisor reports about a running job at each renewal."""

    pid: int | None = None
    rss_bytes: int | None = None
    cpu_percent: float | None = None


@dataclass(frozen=True, kw_only=True)
class RenewResult:
    """What one batch renewal found.

    `lost`: (key, token) of each lease this owner no longer holds (another token,
    another owner, finished, expired and recovered, or gone): their children must be
    killed now.  By token, not key: an old run of a key whose lease is lost and the new
    run of the same key may both be renewed by one supervisor, and only the old is lost.
    `stop_requested`: held keys that `stop` was asked for.
    `notified`: held keys with notifications waiting to be taken.
    `membership`: the owner's entry: "ok" (this instance's; marked seen), "missing"
    (gone: register again), "taken" (another instance holds the id: this one must drain).
    """

    lost: frozenset[tuple[str, int]]
    stop_requested: frozenset[str]
    notified: frozenset[str]
    store_time: float
    membership: MembershipState = "ok"


@dataclass(frozen=True, kw_only=True)
class Note:
    """A notification: `seq` grows strictly per key, in the order they were sent."""

    seq: int
    payload: bytes


@dataclass(frozen=True, kw_only=True)
class StoreHealth:
    """Whether the store takes writes, as `status` shows it.

    `since`: when the store last started taking writes ("ok"), or when it last took
    one ("failing"), store epoch seconds."""

    state: Literal["ok", "failing"]
    since: float
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class SupervisorInfo:
    """One supervisor's entry in the pool's membership."""

    id: str
    instance: str  # unique per process start; tells a restarted supervisor from the old one
    host: str
    pid: int
    capacity: int
    lease_ttl: float
    state: str = "running"  # running | draining
    started_at: float = 0.0
    handlers: tuple[str, ...] = ()  # the handlers it runs
    rebalance: tuple[str, ...] = ()  # those of them whose jobs rebalance moves


@dataclass(frozen=True, kw_only=True)
class SupervisorStatus:
    """A member as the store sees it.  `running_by_handler`: the running jobs it holds,
    per handler; `inbound`: pending jobs released with a reservation for it that has not
    run out (jobs on their way to it)."""

    info: SupervisorInfo
    last_seen: float  # seconds since the store last heard from it
    running: int
    running_by_handler: dict[str, int] = field(default_factory=dict)
    inbound: int = 0


@dataclass(frozen=True, kw_only=True)
class JobRecord:
    """A job as the store keeps it.  `to_json()` gives the contract's `job --json` fields."""

    key: str
    handler: str
    state: JobState
    attempts: int
    max_attempts: int
    token: int
    supervisor: str | None
    payload: Any
    result: Any
    error: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    lease_deadline: float | None = None
    lease_losses: int = 0
    stop_requested: bool = False
    stats: JobStats = field(default_factory=JobStats)
    checkpoint: Any = None
    checkpoint_at: float | None = None
    # A pending job released for one supervisor (a move): only it may claim the job
    # until `reserved_until`; `moved_from` is the supervisor that released it.
    reserved_for: str | None = None
    reserved_until: float | None = None
    moved_from: str | None = None
    run_at: float | None = None  # the requested start time, if any (kept once it starts)
    schedule: str | None = None  # the schedule that dispatched it, None if by hand

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "handler": self.handler,
            "state": self.state,
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "token": self.token,
            "supervisor": self.supervisor,
            "payload": self.payload,
            "result": self.result,
            "error": self.error,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "lease_deadline": self.lease_deadline,
            "lease_losses": self.lease_losses,
            "stop_requested": self.stop_requested,
            "pid": self.stats.pid,
            "checkpoint": self.checkpoint,
            "checkpoint_at": self.checkpoint_at,
            "reserved_for": self.reserved_for,
            "reserved_until": self.reserved_until,
            "moved_from": self.moved_from,
            "run_at": self.run_at,
            "schedule": self.schedule,
        }


@dataclass(frozen=True, kw_only=True)
class PoolSnapshot:
    """Everything `status` shows, read at one store time."""

    pool: str
    store_time: float
    supervisors: tuple[SupervisorStatus, ...]
    counts: dict[str, int]
    running: tuple[JobRecord, ...]
    store: StoreHealth
    moving: tuple[JobRecord, ...] = ()  # pending jobs whose reservation has not run out


@dataclass(frozen=True, kw_only=True)
class Membership:
    """The live members with their load, read at one store time, for rebalancing."""

    store_time: float
    members: tuple[SupervisorStatus, ...]


@dataclass(frozen=True, kw_only=True)
class TickRequest:
    """One supervisor's attempt to fire a schedule's tick (see `Store.fire_tick`)."""

    schedule: str  # the schedule's name
    tick: float  # the tick's nominal time, epoch seconds
    not_before: float  # tick + jitter: the store refuses to fire before this
    fingerprint: str  # a hash of the schedule's settings (shown by `schedules`)
    owner: str  # the firing supervisor's id
    missed: int = 0  # ticks since the last fired one that nobody fired
    dispatch: DispatchRequest | None = None  # a handler schedule's job for this tick


# The outcomes of `fire_tick` that fired the tick (the others changed nothing).
FIRING_OUTCOMES: frozenset[str] = frozenset({"dispatched", "skipped", "fired"})
# A producer's tick given back unapplied (its supervisor stopped mid-plan, or it was
# abandoned): `fire_tick` may fire it again.
RELEASED = "released"


@dataclass(frozen=True, kw_only=True)
class FiredTick:
    """A producer's tick as one supervisor fired it: what guards the writes of its plan.
    It is current while it is the schedule's last fired tick, fired by `owner`, and no
    outcome was recorded for it since (the record's outcome is still "fired")."""

    schedule: str
    tick: float
    owner: str


@dataclass(frozen=True, kw_only=True)
class TickResult:
    outcome: str  # "dispatched" | "skipped" | "fired" | "taken" | "early"
    store_time: float
    last_tick: float | None  # the schedule's last fired tick after the call


@dataclass(frozen=True, kw_only=True)
class ScheduleRecord:
    name: str
    last_tick: float | None
    fingerprint: str | None
    fired_by: str | None
    fired_at: float | None  # store time of the firing
    outcome: str | None  # last outcome: dispatched, skipped, fired, applied, error, ...
    detail: Any = None  # JSON value: counts of an applied plan, an error text, ...
    fires: int = 0  # ticks fired in all
    skipped: int = 0  # ticks whose fixed-key job was still live
    missed: int = 0  # ticks nobody fired (a pool that was down), recorded


@dataclass(frozen=True, kw_only=True)
class ScheduleBook:
    store_time: float
    schedules: tuple[ScheduleRecord, ...]  # sorted by name


EventKind = Literal["wake", "stop", "notify"]


@dataclass(frozen=True)
class StoreEvent:
    """A hint that something changed.  Events may be lost; renewals and polling are the
    source of truth, events only make the reaction faster."""

    kind: EventKind
    key: str | None = None


class Store(Protocol):
    pool: str

    async def dispatch(self, request: DispatchRequest) -> None:
        """Create a pending job, claimable from max(store time, `run_at`).  Raises
        `JobExists` if the key is live.  A finished record of the key is replaced;
        notifications left from it are dropped."""

    async def dispatch_many(
        self, requests: Sequence[DispatchRequest], *, fired: FiredTick | None = None
    ) -> list[bool]:
        """Dispatch each request as `dispatch` does, atomically per call: True where the job
        was created, False where its key was already live (left as it was). Callers send
        chunks of at most DISPATCH_CHUNK (500) requests; one round trip per call on Redis.
        A key given twice in one call: the first request wins, the second gets False.
        With `fired` (a producer's plan), only while that tick is current, in the same
        atomic step; otherwise nothing changes and `StaleTick` is raised."""

    async def claim(
        self,
        owner: str,
        handlers: Sequence[str],
        count: int,
        lease_ttl: float,
        max_lease_losses: int,
        completing: Completion | None = None,
    ) -> ClaimBatch:
        """With `completing`, first `complete` that job, in the same atomic step (one
        round trip on Redis); a stale lease there is reported in `completed` and the
        claim goes on.
        Then recover expired leases of the whole pool: each expired running job
        goes back to pending without spending an attempt and with `lease_losses` + 1,
        keeping the expired deadline, which its next claim hands out as
        `ClaimedJob.lease_expired_at` and clears;
        if a stop was requested for it, it ends `stopped` instead; if `lease_losses`
        reaches `max_lease_losses` it ends `failed` with an error that says so.
        Then move up to `count` claimable pending jobs (handler in `handlers`) to
        running: first those released for `owner` whose reservation has not run out,
        then those due now, oldest first (a job reserved for another supervisor is due
        when its reservation runs out); owner, a new token, attempt + 1, lease
        deadline = store time + `lease_ttl`, started_at = store time, and the
        reservation fields cleared.  `count` may be 0 (recovery only)."""

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
        job is running under this lease."""

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
    ) -> None:
        """running -> pending without spending the attempt (attempts - 1), claimable at
        once, ahead of newer jobs; with `delay` > 0, claimable `delay` seconds from
        now instead.  With `reserve_for` (a move; `delay` then does not apply):
        claimable at once by that supervisor only (its claims take reserved jobs
        first, if it runs their handler), and by any other only `reserve_ttl` seconds
        from now; the record shows `reserved_for`,
        `reserved_until` and `moved_from` (the releasing owner) until it is claimed.
        If a stop was requested, ends `stopped` instead.  Raises `StaleToken` as
        `complete`."""

    async def save_checkpoint(self, lease: Lease, value: bytes) -> None:
        """Keep `value` (JSON text) as the job's checkpoint, with the store time as
        `checkpoint_at`; every later attempt of the key gets it in `ClaimedJob`.  A new
        dispatch of the key starts without one.  Raises `StaleToken` as `complete`."""

    async def finish_stopped(self, lease: Lease, reason: str) -> None:
        """running -> stopped, after the job's processes are gone.  Raises `StaleToken`
        as `complete`."""

    async def stop(self, key: str, *, fired: FiredTick | None = None) -> JobState:
        """Ask for a stop.  pending -> stopped at once; running -> stop requested (the
        owner stops it and calls `finish_stopped`), returns "running"; a finished job
        is left as it is.  Returns the state after the call.  Raises `JobNotFound`.
        With `fired` (a producer's plan), only while that tick is current, in the same
        atomic step; otherwise nothing changes and `StaleTick` is raised."""

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

    async def register(self, info: SupervisorInfo) -> None:
        """Add or refresh the supervisor's membership entry and mark it seen.  Raises
        `SupervisorIdTaken` if another instance with this id was seen within its
        `lease_ttl`."""

    async def deregister(self, supervisor_id: str, instance: str) -> None:
        """Remove the entry if it is still this instance's."""

    async def job(self, key: str) -> JobRecord:
        """One record.  Raises `JobNotFound`."""

    async def jobs(self, state: JobState | None = None) -> list[JobRecord]:
        """Every retained record, or those in one state, oldest first."""

    async def members(self) -> Membership:
        """Supervisors seen within 3 x their lease_ttl, with the running jobs each holds
        per handler and the jobs reserved for each: one cheap read, done by every
        supervisor every few seconds to plan moves.  Read-only."""

    async def counts(self) -> dict[str, int]:
        """Jobs per state (every state, 0 included; finished records past the retention
        period left out): one cheap read, done every few seconds for metrics.  Read-only,
        and works while Redis refuses writes."""

    async def snapshot(self) -> PoolSnapshot:
        """Supervisors seen within 3 x their lease_ttl (as `members`), counts per state,
        running jobs, moving jobs (pending with a live reservation), and the store's
        health.  Works while the store refuses writes (health then
        says "failing"); never removes a supervisor's entry that may still be live."""

    async def fire_tick(self, request: TickRequest) -> TickResult:
        """One atomic step.  If request.not_before > store time: nothing changes, "early".
        If the schedule's last fired tick >= request.tick: nothing changes, "taken"
        (unless it is request.tick and its outcome is RELEASED: it fires again).
        Otherwise record the tick as fired (last_tick, fingerprint, fired_by = owner,
        fired_at = store time, fires + 1, missed + request.missed) and:
        with a dispatch request: create the job as `dispatch` would, outcome "dispatched";
        or, if its key is live, leave it and count skipped + 1, outcome "skipped";
        without one (a producer's tick, run by the caller afterwards): outcome "fired".
        The record's outcome/detail become that outcome (detail: the job key, or None)."""

    async def record_tick_outcome(self, fired: FiredTick, outcome: str, detail: bytes) -> bool:
        """Set the schedule's last outcome and detail (JSON text), only while `fired` is
        current (a producer's plan applied, the error it raised, or RELEASED: given back
        unapplied); whether it was."""

    async def schedules(self) -> ScheduleBook:
        """Every schedule record of the pool, with the store time of the read.  Read-only,
        and works while Redis refuses writes (like snapshot)."""

    async def live_keys_of_schedule(self, schedule: str) -> list[str]:
        """Keys of the live (pending or running) jobs whose `schedule` is this one,
        sorted."""

    async def live_among(self, keys: Sequence[str]) -> set[str]:
        """Those of `keys` whose jobs are live; reads their states only.  Read-only."""

    def events(self) -> AbstractAsyncContextManager[AsyncIterator[StoreEvent]]:
        """Subscribe to change hints (wake, stop KEY, notify KEY)."""

    async def ping(self) -> None:
        """Raise `StoreUnavailable` if the store cannot be reached."""

    async def close(self) -> None: ...
