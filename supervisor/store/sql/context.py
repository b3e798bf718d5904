"""What every part of a SQL store shares: the pool's database, how long finished records
are kept, the store's witness of its own failures, and the few numbers in which the
engines' stores differ.

SqliteStore (sqlite/store.py) and PgStore (postgres/store.py) are composed of the same
parts, one class per group of operations (dispatch.py, claim.py, leases.py,
steering.py, notes.py, output.py, reads.py, ...): each is a `SqlPart` whose methods are
the `Store` protocol's own, over one `SqlContext`, so that each operation is written
once, in its group's file, as the transaction it runs (over tx.py's `Tx`).  An engine's
part overrides an operation only where it has a faster way of its own (PostgreSQL's
dispatch and `get`, one statement outside any transaction).
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from supervisor.errors import StoreFailure
from supervisor.store.sql.tx import Database, Tx
from supervisor.store.witness import FailureWitness

_T = TypeVar("_T")


@dataclass(frozen=True)
class SqlContext:
    pool: str
    db: Database
    retention: float  # how long finished records are kept (s)
    witness: FailureWitness  # on the lease clock, as lease deadlines are
    # Claims drop the records past retention at most this often (s; 0: in every claim):
    # every read leaves them out by their finish time anyway.
    drop_every: float = 0.0
    no_lock_delay: bool = False  # policy.NO_LOCK_DELAY_ENV: a test's switch

    def cutoff(self, tx: Tx) -> float:
        """Finished records older than this are gone."""
        return tx.now - self.retention

    async def witnessed(self, sent_at: float, call: Awaitable[_T]) -> _T:
        """`call`'s answer; its failure is told to the witness (a claim, a renewal)."""
        try:
            return await call
        except StoreFailure:
            self.witness.failed(sent_at)
            raise


class SqlPart:
    """A part of a SQL store: a group of the protocol's operations over the shared context."""

    def __init__(self, ctx: SqlContext) -> None:
        self._ctx = ctx
