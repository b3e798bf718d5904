"""A member's load as the rebalance plan counts it, from its membership entry: shared
by the rebalancer and `status` (its "share" column), which imports only this."""

from __future__ import annotations

from typing import TYPE_CHECKING

from supervisor.core.rebalance import MemberLoad

if TYPE_CHECKING:
    from supervisor.store.records import SupervisorStatus


def member_load(status: SupervisorStatus, *, eligible: bool) -> MemberLoad:
    movable_handlers = set(status.info.rebalance)
    movable = sum(n for handler, n in status.running_by_handler.items()
                  if handler in movable_handlers)
    return MemberLoad(
        id=status.info.id,
        capacity=status.info.capacity,
        movable=movable + status.inbound,
        fixed=max(0, status.running - movable),
        eligible=eligible,
        handlers=frozenset(status.info.handlers),
    )


def takes_work(status: SupervisorStatus) -> bool:
    """Running (not draining) and renewing on time."""
    return status.info.state == "running" and status.last_seen <= status.info.lease_ttl
