"""The job page's Output section: each run's stdout and stderr, as `poolsup logs` shows
them, through the one client call that reads them."""

from __future__ import annotations

from supervisor.client import AsyncClient
from supervisor.job_output import AttemptOutput


async def attempt_outputs(client: AsyncClient, key: str) -> list[AttemptOutput]:
    """Each run's output, oldest first, as `poolsup logs` shows it."""
    return await client.logs(key)
