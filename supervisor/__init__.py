"""poolsup: a per-host supervisor for durable, keyed jobs.

`Client` and `AsyncClient` are imported on first use (PEP 562), so that what imports
only a part of the package (the `poolsup` command line, its `--help`) does not pay for
the client, the stores and their drivers (redis, anyio)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from supervisor.errors import (
    ConfigError,
    DispatchRefused,
    InvalidJob,
    JobExists,
    JobNotFound,
    NotRunning,
    PoolFull,
    PoolsupError,
    StaleToken,
    StoreUnavailable,
    UsageError,
    WaitTimedOut,
)

if TYPE_CHECKING:
    from supervisor.client import AsyncClient, Client

_FROM_CLIENT = ("AsyncClient", "Client")


def __getattr__(name: str) -> Any:
    if name in _FROM_CLIENT:
        from supervisor import client

        return getattr(client, name)
    raise AttributeError(f"module 'supervisor' has no attribute {name!r}")


__all__ = [
    "AsyncClient",
    "Client",
    "ConfigError",
    "DispatchRefused",
    "InvalidJob",
    "JobExists",
    "JobNotFound",
    "NotRunning",
    "PoolFull",
    "PoolsupError",
    "StaleToken",
    "StoreUnavailable",
    "UsageError",
    "WaitTimedOut",
]
