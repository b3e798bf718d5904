"""The child side of poolsup: handler loading, the job context, limits."""

from sandbox.context import Fail, Job, Snooze, Stopped

__all__ = ["Fail", "Job", "Snooze", "Stopped"]
