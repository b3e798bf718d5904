"""The child side of poolsup: handler loading, the job context, limits."""

from sandbox.context import EndSchedule, Fail, Job, Snooze, Stopped

__all__ = ["EndSchedule", "Fail", "Job", "Snooze", "Stopped"]
