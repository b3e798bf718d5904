"""Asking a running job's child for its Python thread stacks (`poolsup debug KEY`): the
fork server signals the child, whose reporter answers on the control channel
(sandbox/stacks.py); the answer reaches every asker waiting at that moment."""

from __future__ import annotations

from typing import Any

import anyio

from supervisor.forks.fork_client import ForkServerClient

Stacks = list[dict[str, Any]]


class StackRequests:
    def __init__(self) -> None:
        self._answered: anyio.Event | None = None
        self._stacks: Stacks | None = None

    async def ask(self, fork_server: ForkServerClient, job_id: str,
                  timeout: float) -> Stacks | None:
        """The child's thread stacks, or None if it did not answer within `timeout`
        (its main thread blocked in C code, or holding the GIL)."""
        if self._answered is None:
            self._answered = anyio.Event()
            await fork_server.ask_stacks(job_id)
        answered = self._answered
        with anyio.move_on_after(timeout):
            await answered.wait()
            return self._stacks
        if self._answered is answered:
            self._answered = None  # the next asker signals again
        return None

    def answered(self, stacks: Stacks) -> None:
        """The child's answer (from its control channel)."""
        self._stacks = stacks
        if self._answered is not None:
            self._answered.set()
            self._answered = None
