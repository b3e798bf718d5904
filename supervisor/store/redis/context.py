"""What every part of RedisStore shares: one pool's keys on one connection, the scripts
and how they are run, and the store's witness of its own failures.

RedisStore (redis/store.py) is composed of its parts, one class per group of operations
(dispatch.py, claim.py, leases.py, steering.py, notes.py, output.py, reads.py, ...):
each is a `RedisPart` whose methods are the `Store` protocol's own, over one
`RedisContext`, so that each operation is written once, in its group's file.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from supervisor.errors import StoreFailure
from supervisor.store.redis.connection import Connection, RedisClient, translated_errors
from supervisor.store.redis.keys import PoolKeys
from supervisor.store.redis.scripts import ScriptArg, ScriptKey, Scripts
from supervisor.store.witness import FailureWitness

if TYPE_CHECKING:  # replicated.py reads the claim's answer (claim.py), a part
    from supervisor.store.redis.replicated import ReplicatedWrites

_T = TypeVar("_T")


@dataclass(frozen=True)
class RedisContext:
    pool: str
    keys: PoolKeys
    connection: Connection
    where: str  # the store's URL without its password, for messages
    retention_ms: int  # how long finished jobs are kept
    scripts: Scripts
    replicated: ReplicatedWrites  # `[pool] wait_replicas` (redis/wait.py)
    witness: FailureWitness
    # Only for the tests that show the lock-delay is needed (tests/integration/
    # test_failover.py): without it a failover that lost writes runs a job twice.
    no_lock_delay: bool

    @property
    def client(self) -> RedisClient:
        return self.connection.client

    async def run(
        self, name: str, keys: Sequence[ScriptKey], args: Sequence[ScriptArg], *, subject: str
    ) -> list[Any]:
        """Script `name`'s answer; the writes a caller is told have happened wait for
        the replicas (replicated.py)."""
        if self.replicated.waits(name):
            return await self.replicated.run(name, keys, args, subject=subject)
        with translated_errors(self.where):
            return await self.scripts.run(name, keys, args, subject=subject)

    async def witnessed(self, sent_at: float, call: Awaitable[_T]) -> _T:
        """`call`'s answer; its failure is told to the witness (a claim, a renewal)."""
        try:
            return await call
        except StoreFailure:
            self.witness.failed(sent_at)
            raise

    async def master_address(self) -> str | None:
        """host:port of the master behind Sentinel, or None."""
        with translated_errors(self.where):
            return await self.connection.master_address()


class RedisPart:
    """A part of RedisStore: a group of the protocol's operations over the shared context."""

    def __init__(self, ctx: RedisContext) -> None:
        self._ctx = ctx
