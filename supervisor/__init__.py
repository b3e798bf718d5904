"""poolsup: a per-host supervisor for durable, keyed jobs."""

from supervisor.client import AsyncClient, Client
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
    WaitTimedOut,
)

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
    "WaitTimedOut",
]
