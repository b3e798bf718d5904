"""What the health endpoints answer (`/healthz`, `/readyz` next to the metrics).

Liveness is what the systemd watchdog pings on: the event loop keeps checking in, and
the fork server answers.  Readiness adds what a load balancer needs before it sends
work: the supervisor serves (registered in the store), is not draining, and the store
answers.  Pure: `now` and the ages are passed in."""

from __future__ import annotations

# The loop checks in every second; this much silence means it is stuck.
MAX_CHECK_IN_AGE = 5.0


def liveness_problem(*, now: float, checked_at: float | None,
                     fork_server_answered: bool) -> str | None:
    """None while alive; otherwise why not, in one line."""
    if checked_at is None:
        return "not started yet"
    if now - checked_at > MAX_CHECK_IN_AGE:
        return f"the event loop has not checked in for {now - checked_at:.1f} s"
    if not fork_server_answered:
        return "the fork server did not answer"
    return None


def readiness_problem(*, alive: str | None, serving: bool, draining: bool,
                      store_failing: bool) -> str | None:
    if alive is not None:
        return alive
    if not serving:
        return "not serving yet (registering in the store)"
    if draining:
        return "draining"
    if store_failing:
        return "the store is failing"
    return None
