"""What every part of SqliteStore shares: the pool's database file, how long finished
records are kept, and the store's witness of its own failures.

SqliteStore (sqlite/store.py) is composed of its parts, one class per group of
operations (dispatch.py, claim.py, leases.py, steering.py, notes.py, output.py,
reads.py, ...): each is a `SqlitePart` whose methods are the `Store` protocol's own,
over one `SqliteContext`, so that each operation is written once, in its group's file,
as the transaction it runs.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from supervisor.errors import StoreFailure
from supervisor.store.sqlite.db import SqliteDatabase, Tx
from supervisor.store.witness import FailureWitness

_T = TypeVar("_T")


@dataclass(frozen=True)
class SqliteContext:
    pool: str
    db: SqliteDatabase
    retention: float  # how long finished records are kept (s)
    witness: FailureWitness  # on the boot clock, as lease deadlines are

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


class SqlitePart:
    """A part of SqliteStore: a group of the protocol's operations over the shared context."""

    def __init__(self, ctx: SqliteContext) -> None:
        self._ctx = ctx
