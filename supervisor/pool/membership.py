"""This supervisor's entry in the pool's membership: joining (retried while the store
fails), joining again when the entry is gone, and writes that must not hold up a
shutdown."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from supervisor.doorbell import Doorbell
from supervisor.errors import StoreFailure, SupervisorIdTaken
from supervisor.observe.store_failures import StoreFailures
from supervisor.store.base import Store
from supervisor.store.records import MembershipState, SupervisorInfo

log = logging.getLogger("poolsup")

# Membership writes at shutdown wait at most this long for a failing store.
SHUTDOWN_WRITE_TIMEOUT = 2.0
TAKEN_RETRY = 0.5


class Membership:
    def __init__(self, store: Store, info: SupervisorInfo, *, on_taken: Callable[[], None]) -> None:
        self._store = store
        self.info = info
        self._on_taken = on_taken
        self.failures = StoreFailures("membership")
        self._work = Doorbell()
        self._rejoin_wanted = False
        self._updates: list[str] = []  # what each pending update of our entry is for

    async def join(self) -> None:
        """Join the pool's membership: retried while the store fails, forever; an id
        held by another live instance is waited on for one lease, then an error."""
        taken_deadline: float | None = None
        while True:
            try:
                await self._store.register(self.info)
                self.failures.succeeded()
                return
            except SupervisorIdTaken:
                if taken_deadline is None:
                    taken_deadline = time.monotonic() + self.info.lease_ttl + 1.0
                if time.monotonic() > taken_deadline:
                    raise
                await anyio.sleep(TAKEN_RETRY)
            except StoreFailure as error:
                await anyio.sleep(self.failures.failed(error))

    def renewed(self, state: MembershipState) -> None:
        """What a renewal found of our entry: "taken" ends us, "missing" joins again
        (in `run`)."""
        if state == "taken":
            log.error("supervisor id %r was taken by another instance (a partition, or a "
                      "second process with this id); draining", self.info.id)
            self._on_taken()
        elif state == "missing" and not self._rejoin_wanted:
            log.warning("our membership entry is gone; registering again")
            self._rejoin_wanted = True
            self._work.ring()

    def update(self, what: str, **changes: Any) -> None:
        """Change our entry (draining, new handlers); `run` writes it."""
        self.info = dataclasses.replace(self.info, **changes)
        self._updates.append(what)
        self._work.ring()

    async def run(self) -> None:
        """Write what `renewed` and `update` asked for, one at a time, while serving."""
        while True:
            await self._work.wait()
            if self._rejoin_wanted:
                try:
                    await self.join()
                except SupervisorIdTaken:
                    self.renewed("taken")
                finally:
                    self._rejoin_wanted = False
            while self._updates:
                what = self._updates.pop(0)
                await self.write_bounded(what, lambda: self._store.register(self.info))

    async def leave(self, *, store_failing: bool) -> None:
        if store_failing:
            log.warning("not deregistering while the store fails; the entry goes stale")
            return
        await self.write_bounded(
            "deregister", lambda: self._store.deregister(self.info.id, self.info.instance))

    async def write_bounded(self, what: str, write: Callable[[], Awaitable[None]]) -> None:
        try:
            with anyio.move_on_after(SHUTDOWN_WRITE_TIMEOUT) as waited:
                await write()
        except (StoreFailure, SupervisorIdTaken) as error:
            log.warning("could not %s: %s", what, error)
            return
        if waited.cancelled_caught:
            log.warning("could not %s: no answer from the store within %g s", what,
                        SHUTDOWN_WRITE_TIMEOUT)
