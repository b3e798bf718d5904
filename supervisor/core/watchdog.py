"""When the supervisor may tell systemd it is alive (WATCHDOG=1).

A ping says "this supervisor can still do its work": its event loop turns on time and
the fork server that starts and fences its children answers.  A stuck loop or a stuck
fork server withholds pings, so systemd restarts the service; a failing store does not
(the supervisor keeps serving through an outage, and says so in STATUS=).
"""

from __future__ import annotations

# A fraction of the interval: how late a tick may come, and how long the fork server
# may take to answer, for the ping to go.  Both together stay within one interval, so
# a healthy supervisor never misses a tick.
TICK_TOLERANCE = 0.5


def watchdog_interval(usec: str | None, watchdog_pid: str | None, *, pid: int) -> float | None:
    """Seconds between pings, half of `WATCHDOG_USEC` as sd_watchdog_enabled(3) advises;
    None when there is no watchdog, or when `WATCHDOG_PID` names another process."""
    try:
        timeout = int(usec) / 1_000_000 if usec is not None else 0.0
        if watchdog_pid is not None and int(watchdog_pid) != pid:
            return None
    except ValueError:
        return None
    return timeout / 2 if timeout > 0 else None


def reason_to_withhold_ping(
    *, now: float, due: float, interval: float, fork_server_answered: bool
) -> str | None:
    """None when a tick that was `due` and came at `now` may ping; otherwise why not."""
    late = now - due
    if late > interval * TICK_TOLERANCE:
        return f"the event loop ran {late:.1f} s late"
    if not fork_server_answered:
        return "the fork server did not answer"
    return None


def next_watchdog_tick(*, now: float, due: float, interval: float) -> float:
    """When the tick after the one `due` is due: in rhythm, or one interval from `now`
    after a stall (missed ticks are not made up)."""
    following = due + interval
    return following if following > now else now + interval
