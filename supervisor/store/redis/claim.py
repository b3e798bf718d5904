"""The Redis claim script's interface (lua/claim-10+n.lua): the pool-wide limits it is
handed, and its answer read into a ClaimBatch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from supervisor.core.limits import Limits
from supervisor.store.records import ClaimBatch, ClaimedJob, LeaseRecovery
from supervisor.store.redis.records import milliseconds, seconds


def limits_arg(limits: Mapping[str, Limits]) -> str:
    """The claim script's ARGV of pool-wide limits: {handler: [max_running,
    max_running_per_group, rate starts, rate period (ms)]}, -1 where none; '' for none."""
    if not any(not limit.unlimited for limit in limits.values()):
        return ""
    return orjson.dumps({
        handler: [-1 if limit.max_running is None else limit.max_running,
                  -1 if limit.max_running_per_group is None else limit.max_running_per_group,
                  -1 if limit.rate is None else limit.rate.starts,
                  0 if limit.rate is None else milliseconds(limit.rate.period)]
        for handler, limit in limits.items() if not limit.unlimited}).decode()


def claim_batch(answer: list[Any], owner: str) -> ClaimBatch:
    """The script's answer: {recovered, next due in, store time, claimed jobs, completed,
    replayed, judged leases, left to a witness, held until}."""
    recovered, next_due, _now, claimed, completed, replayed, judged, left, *rest = answer
    held_until = rest[0] if rest else None
    jobs = tuple(
        ClaimedJob(
            key=key.decode(),
            handler=handler.decode(),
            payload=payload,
            token=int(token),
            attempt=int(attempt),
            max_attempts=int(max_attempts),
            lease_deadline=seconds(deadline),
            owner=owner,
            has_notes=bool(has_notes),
            checkpoint=checkpoint,
            lease_expired_at=None if expired_at is None else seconds(expired_at),
        )
        for (key, handler, payload, token, attempt, max_attempts, deadline, has_notes,
             checkpoint, expired_at) in claimed
    )
    next_due_in = None if next_due is None else max(0.0, seconds(next_due))
    return ClaimBatch(jobs=jobs, recovered=int(recovered), next_due_in=next_due_in,
                      completed=tuple(bool(done) for done in completed),
                      replayed=bool(replayed), left_to_witness=int(left),
                      held_until=None if held_until is None else seconds(held_until),
                      recoveries=tuple(
                          LeaseRecovery(key.decode(), holder.decode(), bool(counted),
                                        int(losses), outcome.decode())
                          for key, holder, counted, losses, outcome in judged))
