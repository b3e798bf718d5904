"""The error hierarchy: one root, a default message per class, one exit code per class."""

from __future__ import annotations


class PoolsupError(Exception):
    """poolsup failed."""

    exit_code = 1

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


class ConfigError(PoolsupError):
    """The configuration is invalid."""

    exit_code = 2


class UsageError(PoolsupError):
    """The command was used wrongly."""

    exit_code = 2


class InvalidJob(UsageError):
    """The job key, handler or payload is invalid."""


class StoreFailure(PoolsupError):
    """The store failed: unreachable, or it answered with an error.

    Long-lived loops catch this one class, retry with backoff and never exit for it.
    """

    exit_code = 1


class StoreUnavailable(StoreFailure):
    """The store cannot be reached."""


class StoreError(StoreFailure):
    """The store refused the request (out of memory, read-only replica, failover, ...)."""


class DispatchRefused(PoolsupError):
    """The store refused to add the job; the message says why."""

    exit_code = 3


class JobExists(DispatchRefused):
    """A job with this key is already live (pending or running), or finished within the
    dispatch's unique window."""


class PoolFull(DispatchRefused):
    """The pool holds `[pool] max_pending` pending jobs already."""


class NotRunning(PoolsupError):
    """The job is not running (or no supervisor that runs it answered)."""

    exit_code = 1


class JobNotFound(PoolsupError):
    """No job has this key."""

    exit_code = 4


class AttemptNotFound(JobNotFound):
    """The job has no output of that attempt (it has not run it, or kept none)."""


class JobFailed(PoolsupError):
    """The job failed."""

    exit_code = 5


class JobStopped(PoolsupError):
    """The job was stopped."""

    exit_code = 6


class WaitTimedOut(PoolsupError, TimeoutError):
    """The job is still live (pending or running) when the wait ran out; it goes on."""

    exit_code = 7


class StaleToken(PoolsupError):
    """The lease token is stale: another claim owns the job now."""

    exit_code = 1


class StaleTick(PoolsupError):
    """A newer tick of the schedule fired (or this one's outcome is recorded): its plan
    changes nothing more."""

    exit_code = 1


class SupervisorIdTaken(PoolsupError):
    """Another live supervisor of the pool has the same id."""

    exit_code = 1
