"""Asking a running job's child for its Python thread stacks (`poolsup debug KEY`): the
fork server signals the child, whose reporter answers on the control channel
(sandbox/stacks.py); the answer reaches every asker waiting at that moment. A job of a
shared child (child_concurrency) is asked on its own channel instead, by the job's one
writer (`channel_wanted`), and its child answers with the job's task's stack."""

from __future__ import annotations

from typing import Any

import anyio

from supervisor.doorbell import Doorbell
from supervisor.forks.fork_client import ForkServerClient

Stacks = list[dict[str, Any]]


class StackRequests:
    def __init__(self) -> None:
        self._answered: anyio.Event | None = None
        self._stacks: Stacks | None = None
        self._channel_wanted = False

    def take_channel_request(self) -> bool:
        """Whether a request waits for the job's writer to send it (and it is taken)."""
        wanted, self._channel_wanted = self._channel_wanted, False
        return wanted

    async def ask(self, fork_server: ForkServerClient, job_id: str,
                  timeout: float, *, on_channel: Doorbell | None = None) -> Stacks | None:
        """The child's thread stacks, or None if it did not answer within `timeout`
        (its main thread blocked in C code, or holding the GIL)."""
        if self._answered is None:
            self._answered = anyio.Event()
            if on_channel is None:
                await fork_server.ask_stacks(job_id)
            else:  # rung for the job's writer, which sends the request
                self._channel_wanted = True
                on_channel.ring()
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
