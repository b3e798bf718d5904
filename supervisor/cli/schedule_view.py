"""Schedules as `poolsup schedules` and `status` print them (reports/schedules.py builds
the views)."""

from __future__ import annotations

from typing import Any

from supervisor.cadence import tick_label
from supervisor.run_at import format_time


def render_schedules_text(views: list[dict[str, Any]]) -> str:
    if not views:
        return "(no schedules)"
    lines = [f"{'SCHEDULE':<20} {'WHEN':<16} {'LAST TICK':<18} {'NEXT IN':>8} {'FIRED BY':<14} "
             f"{'FIRES':>5} {'SKIP':>4} {'MISS':>4}  OUTCOME"]
    for view in views:
        when = (f"every {view['every']:g}s" if view["every"] is not None
                else view["cron"] or "(not configured)")
        last = tick_label(view["last_tick"]) if view["last_tick"] is not None else "-"
        upcoming = ("-" if view["next_tick"] is None
                    else f"{max(0.0, view['next_tick'] - view['store_time']):.0f}s")
        lines.append(
            f"{view['name'][:20]:<20} {when[:16]:<16} {last:<18} {upcoming:>8} "
            f"{(view['fired_by'] or '-')[:14]:<14} {view['fires']:>5} {view['skipped']:>4} "
            f"{view['missed']:>4}  {describe_outcome(view)}"
        )
    return "\n".join(lines)


def describe_outcome(view: dict[str, Any]) -> str:
    last = _last_outcome(view)
    if view.get("state") == "ended":
        return (f"ended {format_time(view['ended_at'])} by tick "
                f"{tick_label(view['ended_tick'])} ({last}); fires again once its "
                "definition changes")
    return last


def _last_outcome(view: dict[str, Any]) -> str:
    outcome, detail = view["outcome"], view["detail"]
    if outcome is None:
        return "-"
    if isinstance(detail, dict) and "error" in detail:
        return f"{outcome}: {detail['error']}"
    if isinstance(detail, dict):
        return f"{outcome} ({', '.join(f'{count} {what}' for what, count in detail.items())})"
    return outcome if detail is None else f"{outcome} {detail}"


def summary_line(views: list[dict[str, Any]]) -> str:
    """The one line `status` shows."""
    configured = [view for view in views if view["configured"]]
    text = f"schedules: {len(configured)}"
    fired = [view for view in views if view["fired_at"] is not None]
    if fired:
        latest = max(fired, key=lambda view: view["fired_at"])
        ago = max(0.0, latest["store_time"] - latest["fired_at"])
        text += f"; last fired {latest['name']} {ago:.0f}s ago ({describe_outcome(latest)})"
    upcoming = [view for view in configured if view["next_tick"] is not None]
    if upcoming:
        soonest = min(upcoming, key=lambda view: view["next_tick"])
        wait = max(0.0, soonest["next_tick"] - soonest["store_time"])
        text += f"; next {soonest['name']} in {wait:.0f}s"
    return text
