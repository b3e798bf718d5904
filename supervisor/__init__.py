"""poolsup: a per-host supervisor for durable, keyed jobs."""

from supervisor.client import AsyncClient, Client
from supervisor.errors import (
    ConfigError,
    InvalidJob,
    JobExists,
    JobNotFound,
    PoolsupError,
    StaleToken,
    StoreUnavailable,
)

__all__ = [
    "AsyncClient",
    "Client",
    "ConfigError",
    "InvalidJob",
    "JobExists",
    "JobNotFound",
    "PoolsupError",
    "StaleToken",
    "StoreUnavailable",
]
