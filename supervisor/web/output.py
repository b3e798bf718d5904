"""The job page's Output section: each run's stdout and stderr, as `poolsup logs` shows
them, through the one client call that reads them."""

from __future__ import annotations

from typing import Any

from supervisor.client import AsyncClient


async def attempt_outputs(client: AsyncClient, key: str) -> list[Any] | None:
    """Each run's output (AttemptOutput: attempt, supervisor, text, dropped_bytes, ended),
    oldest first, as `client.logs` gives it; None where this client cannot read outputs
    (a poolsup without `logs`)."""
    logs = getattr(client, "logs", None)
    if logs is None:
        return None
    outputs: list[Any] = await logs(key)
    return outputs
