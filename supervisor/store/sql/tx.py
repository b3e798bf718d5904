"""The transaction the SQL stores' rules are written over (`Tx`), and the database that
runs one (`Database`).

Each rule of store/sql/ is an `async def` over one `Tx`: the named statements of the
engine's `sql/queries.sql` (`run`, `rows`, `row`, `value`, the pool and the store's
clocks bound in), and the few steps each engine takes its own way, named for what they
do, not how:

- the claim's fixed part (`claim_context`: its reads, and on PostgreSQL the failover
  epoch and its hold, postgres/failover.py), and how due jobs start (`due_keys`,
  `start_jobs`, `start_due`) and complete (`send_completion`): SQLite runs these rules as
  Python over plain statements, PostgreSQL as SQL functions (postgres/sql/functions.sql)
  pipelined in one round trip;
- admitting dispatched jobs (`admit_jobs`), and reading job histories (`histories`: a
  table on SQLite, a column on PostgreSQL);
- the change hints (`requeued`, `ended`, `reserved`, `tell_holder`, `wake_pool`, `left`):
  rows of SQLite's `events` table, which supervisors poll, or PostgreSQL NOTIFY to the
  one supervisor concerned (postgres/events.py).

Two clocks: `now` is the store's time for what users read (SQLite: this host's wall
clock; PostgreSQL: the server's), `lease_now` the one leases count on (SQLite:
CLOCK_BOOTTIME, which never steps; PostgreSQL: the server's, the same as `now`);
`wall_time` turns a lease time into a wall time for records.

SQLite's Tx never suspends in its `async` methods: its worker thread drives each rule's
coroutine to its end without an event loop (sqlite/drive.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from supervisor.store.records import Completion, DispatchRequest, JobEvent

_T = TypeVar("_T")

Row = Any  # a result row, read by column name (sqlite3.Row, psycopg's dict row)
Answer = Callable[[], Awaitable[bool]]  # a completion's answer, read when wanted
HolderRequest = Literal["stop", "notify", "debug"]


@dataclass(frozen=True)
class ClaimContext:
    """What a claim reads before it decides (Tx.claim_context)."""

    last_claim: float | None  # the pool's last claim noted, and its last write gap
    gap_start: float | None
    gap_end: float | None
    paused: Sequence[str]  # the paused names (handlers, or "*")
    expired: Sequence[Row]  # the running jobs whose lease ran out, oldest first
    note_every: float  # a claim notes itself at most this often (0: every claim)
    hold_until: float | None = None  # the hold after a change of primary, if any
    held: bool = False  # it holds now: no job starts


class Tx(Protocol):
    pool: str
    now: float
    lease_now: float

    def wall_time(self, lease_time: float) -> float:
        """A time on the lease clock as a wall-clock epoch time."""

    async def run(self, query: str, **params: Any) -> object: ...

    async def rows(self, query: str, **params: Any) -> list[Row]: ...

    async def row(self, query: str, **params: Any) -> Row | None: ...

    async def value(self, query: str, **params: Any) -> Any: ...

    # The engine's own steps.

    async def claim_context(self, lease_ttl: float, *, lock_delay: bool,
                            recover: bool = True) -> ClaimContext:
        """The claim's first reads; the expired leases only if it `recover`s."""

    async def due_keys(self, owner: str, handlers: Sequence[str], count: int) -> list[Row]:
        """Up to `count` jobs of `handlers` that may start now, in the order they start
        (key, handler, job_group): those reserved for `owner` first."""

    async def start_jobs(self, due: Sequence[Row], owner: str, lease_ttl: float,
                         ) -> list[Row]:
        """Start the `due` rows (of `due_keys`) under `owner`'s leases; the started jobs."""

    async def start_due(self, owner: str, handlers: Sequence[str], count: int,
                        lease_ttl: float) -> list[Row]:
        """`start_jobs` of the first `count` of `due_keys`."""

    async def send_completion(self, completion: Completion) -> Answer:
        """running -> succeeded with the result; the answer: False if the lease is stale,
        True if done now or by an earlier try whose reply was lost."""

    async def admit_jobs(self, requests: Sequence[DispatchRequest], retention: float, *,
                         limit_pending: bool) -> list[int]:
        """Create each job unless refused (a code of store/refusals.py per request); with
        `limit_pending`, held to the pool's max_pending."""

    async def histories(self, rows: Sequence[Row]) -> list[tuple[JobEvent, ...]]:
        """The history of the job of each row, oldest event first."""

    # Change hints, sent when the transaction commits.

    async def requeued(self, handler: str, *, due_now: bool) -> None:
        """A job of `handler` is pending again (`due_now`: claimable at once)."""

    async def ended(self, key: str) -> None:
        """The job's run ended (finished, or its lease recovered)."""

    async def reserved(self, holder: str) -> None:
        """A job was released for `holder` (a move)."""

    async def tell_holder(self, key: str, request: HolderRequest, detail: str = "") -> None:
        """A request for the supervisor that holds the job (`detail`: a debug request's id)."""

    async def wake_pool(self) -> None:
        """Every supervisor of the pool looks for jobs (a resume)."""

    async def left(self, owner: str) -> None:
        """`owner` left the pool: it waits for no job."""


Work = Callable[[Tx], Coroutine[Any, Any, _T]]  # a rule, run in one transaction


class Database(Protocol):
    async def write(self, work: Work[_T], *, pool_lock: bool = True,
                    first: bool = False) -> _T:
        """Run `work` in one write transaction; `pool_lock`: one after another with the
        pool's other writes (PostgreSQL's pool lock; SQLite's writes always are);
        `first`: ahead of the calls waiting."""

    async def read(self, work: Work[_T]) -> _T:
        """Run `work` in one read transaction (one consistent view)."""
