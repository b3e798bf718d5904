"""`[pool] wait_replicas`: which writes wait for the replicas, and what too few
acknowledgements mean for each (redis/wait.py sends the script and WAIT)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from supervisor.errors import StoreFailure, StoreUnavailable
from supervisor.store.records import Lease
from supervisor.store.redis.claim import claim_batch
from supervisor.store.redis.connection import translated_errors
from supervisor.store.redis.scripts import ScriptArg, ScriptKey, Scripts, checked
from supervisor.store.redis.wait import WAIT_TIMEOUT_MS

# The writes a caller is told have happened (a client's), and a supervisor's
# (de)registration (lost, the membership would go back in time and take the new
# instance's id for another's); the claim is `ReplicatedWrites.claim`'s.
WAITED = frozenset({"dispatch", "notify", "stop", "retry", "register", "deregister"})


class ReplicatedWrites:
    def __init__(self, scripts: Scripts, where: str, replicas: int) -> None:
        self._scripts = scripts
        self._where = where
        self.replicas = replicas

    def waits(self, name: str) -> bool:
        return self.replicas > 0 and name in WAITED

    async def run(self, name: str, keys: Sequence[ScriptKey], args: Sequence[ScriptArg], *,
                  subject: str) -> list[Any]:
        """The script's answer once the replicas acknowledged it.  A refusal (key live,
        unknown) with too few acks is a failure too: what it saw may be the unreplicated
        write of an earlier try."""
        answer, acks = await self._run(name, keys, args, subject=subject)
        if acks < self.replicas:
            raise StoreUnavailable(
                f"redis at {self._where}: {self._not_replicated(acks)} the {name} of "
                f"{subject!r}; it is on the master, and may not survive its failover")
        return checked(answer, subject)

    async def claim(self, keys: Sequence[ScriptKey], args: Sequence[ScriptArg], *, owner: str,
                    release: Callable[[Lease], Awaitable[None]]) -> list[Any]:
        """The claim script's answer; its jobs start only once the replicas hold the
        claim: else they are released (fenced by their tokens: never started, they spend
        no attempt) and the claim is a store failure.  A release that fails leaves the
        lease to lapse, and the job to the store's recovery."""
        raw, acks = await self._run("claim", keys, args, subject=owner)
        answer = checked(raw, owner)
        if acks >= self.replicas:
            return answer
        for job in claim_batch(answer, owner).jobs:
            with contextlib.suppress(StoreFailure):
                await release(job.lease)
        raise StoreUnavailable(f"redis at {self._where}: {self._not_replicated(acks)} the "
                               f"claim; its {len(answer[3])} job(s) released unstarted")

    async def _run(self, name: str, keys: Sequence[ScriptKey], args: Sequence[ScriptArg], *,
                   subject: str) -> tuple[list[Any], int]:
        with translated_errors(self._where):
            return await self._scripts.run_replicated(name, keys, args, subject=subject,
                                                      replicas=self.replicas)

    def _not_replicated(self, acks: int) -> str:
        return (f"only {acks} of wait_replicas = {self.replicas} replicas acknowledged "
                f"within {WAIT_TIMEOUT_MS / 1000:g} s")
