"""What every part of PgStore shares: the pool's database, how long finished records
are kept, and the store's witness of its own failures.

PgStore (postgres/store.py) is composed of its parts, one class per group of
operations (dispatch.py, claim.py, leases.py, steering.py, notes.py, output.py,
reads.py, ...), each a `PgPart` over one `PgContext`, as the SQLite store's are
(sqlite/context.py): each operation is written once, in its group's file, as the
transaction it runs.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from supervisor.errors import StoreFailure
from supervisor.store.postgres.db import PgDatabase, Tx
from supervisor.store.witness import FailureWitness

_T = TypeVar("_T")


@dataclass(frozen=True)
class PgContext:
    pool: str
    db: PgDatabase
    retention: float  # how long finished records are kept (s)
    witness: FailureWitness
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


class PgPart:
    """A part of PgStore: a group of the protocol's operations over the shared context."""

    def __init__(self, ctx: PgContext) -> None:
        self._ctx = ctx
