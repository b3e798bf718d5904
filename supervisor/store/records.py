"""What the stores hand out and take in: jobs, leases, claims, records, members,
schedules and events, as frozen values (the Store protocol is in base.py)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

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
    # 0-9: a handler's due jobs are claimed highest priority first, oldest first within one.
    priority: int = 0
    # What the handler's max_running_per_group counts; None: no group.
    group: str | None = None
    # Refused (JobExists) when the key finished within this many seconds; 0: never.
    unique_for: float = 0.0
    # The dispatching caller's W3C trace context (`traceparent`, `tracestate` headers),
    # kept with the job and handed to each attempt (docs/tracing.md); None: none.
    traceparent: str | None = None
    tracestate: str | None = None


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
    # The W3C trace context its dispatch kept (DispatchRequest), None if none.
    traceparent: str | None = None
    tracestate: str | None = None

    @property
    def lease(self) -> Lease:
        return Lease(self.key, self.token, self.owner)


@dataclass(frozen=True)
class Completion:
    """A job's result, stored by the `claim` that fills the slot its job freed."""

    lease: Lease
    result: bytes


@dataclass(frozen=True)
class LeaseRecovery:
    """What a claim's recovery did with one expired lease: whether its end `counted` as
    a loss of the job, the job's losses in a row since, and its `outcome` ("requeued",
    "failed" at the limit, or "stopped" as asked)."""

    key: str
    holder: str
    counted: bool
    losses: int
    outcome: str


@dataclass(frozen=True, kw_only=True)
class ClaimBatch:
    """What one `claim` call did.

    `next_due_in`: seconds until the earliest pending job of the claimed handlers held
    back by retry backoff, by its `run_at`, or by a reservation for another supervisor,
    becomes claimable (None if there is none), so the claimer knows when to look again.
    `completed`: for each `Completion` the claim was given, in order, whether its result
    was stored (False: the lease was stale, as `complete` would have raised).
    """

    jobs: tuple[ClaimedJob, ...]
    recovered: int
    next_due_in: float | None
    completed: tuple[bool, ...] = ()
    # An answer to a claim sent again after its reply was lost: the jobs the lost one
    # handed out, their leases as old as that claim.
    replayed: bool = False
    recoveries: tuple[LeaseRecovery, ...] = ()  # one per lease recovered
    left_to_witness: int = 0  # expired leases left for a claim that saw the store's gap
    # Until when (store time) no lease is handed out after a change of the store's master
    # (core/failover.py); None while claims are not held.
    held_until: float | None = None


@dataclass(frozen=True, kw_only=True)
class JobEvent:
    """One step of a job's history (`job --json` `events`): when (store time), what, and
    the supervisor and token of the run it concerns (None for a step of no run, such as
    a dispatch); `detail` says more (an error's first line, why it was released)."""

    at: float
    event: str
    supervisor: str | None = None
    token: int | None = None
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "event": self.event, "supervisor": self.supervisor,
                "token": self.token, "detail": self.detail}


def snooze_detail(delay: float) -> str:
    """The detail of a `snoozed` event, written alike by every store."""
    return f"for {delay:g} s"


@dataclass(frozen=True, kw_only=True)
class RunOutput:
    """What one run of a job (one claim, one token) printed, as the store keeps it:
    `data` is the kept bytes from byte `start` of everything the run printed on; the
    store keeps the newest `max_log` bytes, so bytes before `kept_from` are no longer
    there.  `total` bytes were printed so far.  `ended`: no more will come (the run's
    supervisor wrote its last output, or the job is no longer running under this
    token)."""

    token: int
    attempt: int
    supervisor: str
    data: bytes
    start: int
    kept_from: int
    total: int
    ended: bool


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
    master: str | None = None  # host:port of the master behind Sentinel
    # Until when claims are held after a change of master (core/failover.py), if now.
    hold_until: float | None = None


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
    # What a handler's sandbox cannot enforce on its host: "HANDLER: cannot ...".
    sandbox_notes: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()  # those of them whose jobs share a child (child_concurrency)


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
    snoozes: int = 0  # runs of this dispatch that ended in `sandbox.Snooze`
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
    priority: int = 0
    group: str | None = None
    events: tuple[JobEvent, ...] = ()  # its history, oldest first
    traceparent: str | None = None  # the W3C context its dispatch kept (docs/tracing.md)

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
            "snoozes": self.snoozes,
            "stop_requested": self.stop_requested,
            "pid": self.stats.pid,
            "checkpoint": self.checkpoint,
            "checkpoint_at": self.checkpoint_at,
            "reserved_for": self.reserved_for,
            "reserved_until": self.reserved_until,
            "moved_from": self.moved_from,
            "run_at": self.run_at,
            "schedule": self.schedule,
            "priority": self.priority,
            "group": self.group,
            "traceparent": self.traceparent,
            "events": [event.to_json() for event in self.events],
        }


# The name a pause of the whole pool is kept under, among the handlers' names.
PAUSE_ALL = "*"


@dataclass(frozen=True)
class Paused:
    """What no claim serves: the whole pool, and these handlers."""

    pool: bool = False
    handlers: tuple[str, ...] = ()

    @classmethod
    def of(cls, names: Iterable[str]) -> Paused:
        found = set(names)
        return cls(pool=PAUSE_ALL in found, handlers=tuple(sorted(found - {PAUSE_ALL})))

    def as_json(self) -> dict[str, object]:
        return {"pool": self.pool, "handlers": list(self.handlers)}


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
    paused: Paused = Paused()


@dataclass(frozen=True, kw_only=True)
class Membership:
    """The live members with their load, read at one store time, for rebalancing."""

    store_time: float
    members: tuple[SupervisorStatus, ...]


class Unchecked(enum.Enum):
    """A `TickRequest` that names no basis for its `missed` (a caller from before the
    basis): the store adds its `missed` unchecked."""

    UNCHECKED = "unchecked"


UNCHECKED = Unchecked.UNCHECKED


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
    # The last fired tick `missed` was counted from, as the caller read it (None: never
    # fired): the store fires only while its record's last tick is still this one, else
    # answers "stale" (see `Store.fire_tick`).
    basis: float | Unchecked | None = UNCHECKED


def basis_moved(request: TickRequest, last_tick: float | None) -> bool:
    """Whether the schedule's last fired tick is no longer the one the request's
    `missed` was counted from (both None: the same; compared as numbers)."""
    basis = request.basis
    if basis is UNCHECKED:
        return False
    if basis is None or last_tick is None:
        return basis is not last_tick
    return float(basis) != float(last_tick)


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
    # "dispatched" | "skipped" | "fired" | "taken" | "stale" | "early" | "ended"
    outcome: str
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
    # Ended by its producer (a plan's "end_schedule", sandbox.EndSchedule): store time of
    # the end and the tick whose plan ended it; no tick of this `fingerprint` fires.
    ended_at: float | None = None
    ended_tick: float | None = None


@dataclass(frozen=True, kw_only=True)
class ScheduleBook:
    store_time: float
    schedules: tuple[ScheduleRecord, ...]  # sorted by name


EventKind = Literal["wake", "stop", "notify", "debug"]


@dataclass(frozen=True)
class StoreEvent:
    """A hint that something changed.  Events may be lost; renewals and polling are the
    source of truth, events only make the reaction faster."""

    kind: EventKind
    key: str | None = None
    request: str | None = None  # a "debug" event's request id (Store.request_stacks)

