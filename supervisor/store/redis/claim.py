"""The Redis store's claim (lua/claim-10+n.lua): jobs handed out with their leases, the
completions of earlier ones in the same step, and the lease losses it judges; the
pool-wide limits the script is handed, and its answer read into a ClaimBatch.

`RedisClaim` builds on the lease ends (leases.py): a claim the replicas did not
acknowledge gives its jobs back unstarted (replicated.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from supervisor.core.limits import Limits
from supervisor.store.policy import (
    CLAIM_NOTE_EVERY,
    JUDGE_AFTER_GAP,
    MIN_CLAIM_GAP,
    MIN_FAILING_SPAN,
    claim_deadline,
)
from supervisor.store.records import ClaimBatch, ClaimedJob, Completion, Lease, LeaseRecovery
from supervisor.store.redis.leases import RedisLeases
from supervisor.store.redis.records import milliseconds, seconds
from supervisor.store.redis.scripts import ScriptArg, ScriptKey

# 2: pending jobs are also in one claim queue per handler; 3: the running jobs are
# counted per owner and handler in running-load (lua/upgrade-layout-3.lua).
LAYOUT = 3


class RedisClaim(RedisLeases):
    claim_lanes = 2  # Store.claim_lanes
    _layout_checked = False  # this store upgraded the pool's keys to LAYOUT
    _settings_for: tuple[object, ...] = ()  # what `_settings` was encoded for
    _settings: tuple[tuple[tuple[bytes, ...], ...], bytes]  # the keys per lane, ARGV 1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._last_claim_ids: dict[int, str] = {}  # per lane, the id of its last claim sent

    async def claim(
        self,
        owner: str,
        handlers: Sequence[str],
        count: int,
        lease_ttl: float,
        max_lease_losses: int,
        completing: Sequence[Completion] = (),
        claim_id: str = "",
        limits: Mapping[str, Limits] | None = None,
        only_completing: bool = False,
        lane: int = 0,
        recover: bool = True,
    ) -> ClaimBatch:
        ctx = self._ctx
        if not self._layout_checked:
            k = ctx.keys
            await ctx.run("upgrade-layout", [k.pending, k.layout, k.running],
                          [k.prefix, LAYOUT], subject=ctx.pool)
            self._layout_checked = True
        keys_by_lane, settings = self._claim_settings(owner, handlers, lease_ttl,
                                                      max_lease_losses)
        keys = keys_by_lane[lane]
        sent_at = ctx.witness.sending()
        since = ctx.witness.since(sent_at)
        claim_by = claim_deadline(ctx.witness.store_time(sent_at), lease_ttl)
        this: dict[str, Any] = {
            "count": count, "id": claim_id, "limits": limits_arg(limits or {}),
            "complete": [[c.lease.key, str(c.lease.token), c.result.decode()]
                         for c in completing]}
        if not recover:
            this["recover"] = False
        if only_completing and count == 0:
            this["settle"], this["id"] = True, ""
        elif claim_id and claim_id == self._last_claim_ids.get(lane):
            this["again"] = True  # its reply was lost: the script reads what it did
        if claim_id:
            self._last_claim_ids[lane] = claim_id
        if since is not None:
            this["since"] = milliseconds(since)
        if claim_by is not None:
            this["claim_by"] = milliseconds(claim_by)
        answer = await ctx.witnessed(sent_at, self._claim(
            owner, keys, [settings, orjson.dumps(this)]))
        ctx.witness.answered(sent_at, seconds(answer[2]), reported=True, hold=lease_ttl)
        return claim_batch(answer, owner)

    def _claim_settings(self, owner: str, handlers: Sequence[str], lease_ttl: float,
                        max_lease_losses: int) -> tuple[tuple[tuple[bytes, ...], ...], bytes]:
        """The claim's keys in each lane (they differ in the lane's last claim) and its
        ARGV 1, the same at each of this owner's claims: encoded once, not at each claim."""
        ctx = self._ctx
        wanted = (owner, tuple(handlers), lease_ttl, max_lease_losses, ctx.retention_ms,
                  ctx.no_lock_delay)
        if self._settings_for == wanted:
            return self._settings
        k = ctx.keys
        handlers = list(dict.fromkeys(handlers))  # a queue declared twice would be scanned twice
        keys_by_lane = tuple(
            [k.pending, k.running, k.token, k.done("failed"), k.done("stopped"),
             k.write_probe, k.reserved(owner), k.health, k.last_claim(owner, lane), k.epoch,
             *(k.queue(handler) for handler in handlers)]
            for lane in range(self.claim_lanes))
        settings = orjson.dumps({
            "prefix": k.prefix, "owner": owner, "ttl": milliseconds(lease_ttl),
            "max_losses": max_lease_losses, "retention": ctx.retention_ms,
            "channel": k.channel, "min_failing_span": milliseconds(MIN_FAILING_SPAN),
            "min_claim_gap": milliseconds(MIN_CLAIM_GAP),
            "judge_after_gap": milliseconds(JUDGE_AFTER_GAP),
            "claim_note_every": milliseconds(CLAIM_NOTE_EVERY),
            "lock_delay": not ctx.no_lock_delay, "handlers": handlers})
        self._settings_for = wanted
        self._settings = (tuple(tuple(key.encode() for key in keys) for keys in keys_by_lane),
                          settings)
        return self._settings

    async def _claim(self, owner: str, keys: Sequence[ScriptKey],
                     args: Sequence[ScriptArg]) -> list[Any]:
        if not self._ctx.replicated.replicas:
            return await self._ctx.run("claim", keys, args, subject=owner)

        async def release(lease: Lease) -> None:
            await self.release(lease, reason="replicas did not acknowledge the claim")

        return await self._ctx.replicated.claim(keys, args, owner=owner, release=release)


def limits_arg(limits: Mapping[str, Limits]) -> dict[str, list[float]]:
    """The claim's pool-wide limits (ARGV 2's `limits`): {handler: [max_running,
    max_running_per_group, rate starts, rate period (ms)]}, -1 where none; {} for none."""
    return {
        handler: [-1 if limit.max_running is None else limit.max_running,
                  -1 if limit.max_running_per_group is None else limit.max_running_per_group,
                  -1 if limit.rate is None else limit.rate.starts,
                  0 if limit.rate is None else milliseconds(limit.rate.period)]
        for handler, limit in limits.items() if not limit.unlimited}


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
            traceparent=_text(traceparent),
            tracestate=_text(tracestate),
        )
        for (key, handler, payload, token, attempt, max_attempts, deadline, has_notes,
             checkpoint, expired_at, traceparent, tracestate) in claimed
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


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()
