"""The chaos run's two schedules, drawn from one seed before anything starts: the faults
(one episode after another) and the workload (dispatches, notes, stops).  Pure: the same
seed and options give the same plans, whatever the machine does while they run."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any


def supervisor_ids(count: int) -> tuple[tuple[str, ...], str]:
    """The ids of `count` supervisors, and of the one more that joins and leaves."""
    letters = "abcdefghijklmnopqrstuvwxy"[:count + 1]
    return tuple(letters[:-1]), letters[-1]


REDIS_FAULTS = ("freeze_redis", "restart_redis", "redis_oom", "redis_readonly")
# Behind Sentinel: the master killed (its writes replicated), or killed once the replica
# has missed its last writes (lost on the promoted replica).
SENTINEL_FAULTS = ("failover", "lose_writes")
# PostgreSQL's own (--store postgres): every server process frozen (SIGSTOP), a restart
# (`pg_ctl restart -m fast`), new connections refused (ALLOW_CONNECTIONS false, the open
# ones ended) for a while.
POSTGRES_FAULTS = ("freeze_postgres", "restart_postgres", "refuse_postgres")
STORE_FAULTS = REDIS_FAULTS + SENTINEL_FAULTS + POSTGRES_FAULTS
FAULT_WEIGHTS = {"kill_supervisor": 4, "freeze_supervisor": 3, "freeze_group": 2,
                 "kill_fork_server": 3, "drain": 3, "rolling_restart": 1, "join_leave": 2,
                 "freeze_redis": 2, "restart_redis": 2, "redis_oom": 2, "redis_readonly": 2,
                 "failover": 3, "lose_writes": 3,
                 "freeze_postgres": 2, "restart_postgres": 2, "refuse_postgres": 2}

# Kind of job -> weight among the dispatches after the first long-running ones.
KIND_WEIGHTS = {"short": 35, "cpu": 8, "failing": 8, "fail_for_good": 5, "stoppable": 10,
                "checkpointing": 12, "long": 4, "limited": 8, "async": 20,
                "async_stoppable": 6}
LONG_AT_START = 4
MAX_LIVE_LONG = 6
QUIET_BEFORE_STOP = 3.0  # no note goes to a key this close to its stop
DISPATCH_MEAN_GAP = 0.8


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the start (the episode waits for the previous one)
    kind: str
    target: str  # a supervisor id, "redis" or "postgres" (the store), or "all"
    duration: float  # how long the fault lasts (frozen, down, erroring, joined)
    lane: int = 0  # faults of one lane come one after another; lanes overlap


@dataclass(frozen=True)
class Work:
    at: float
    action: str  # "dispatch", "notify", "stop"
    key: str
    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    note: int = 0


def plan_faults(rng: random.Random, seconds: float, *, redis: bool, lease_ttl: float,
                supervisors: int = 3, overlap: bool = False,
                sentinel: bool = False, postgres: bool = False) -> list[Fault]:
    """One lane of faults; with `overlap` (and Redis or PostgreSQL), two: the
    supervisors' faults in lane 0 and the store's in lane 1, at the same time.  With
    `sentinel`, the store's faults are failovers (SENTINEL_FAULTS) instead of
    REDIS_FAULTS; with `postgres`, POSTGRES_FAULTS."""
    if sentinel:
        kinds = [kind for kind in FAULT_WEIGHTS
                 if kind not in REDIS_FAULTS and kind not in POSTGRES_FAULTS]
        return _lane(rng, seconds, kinds, lease_ttl, supervisors, 0)
    own = REDIS_FAULTS if redis else POSTGRES_FAULTS if postgres else ()
    kinds = [kind for kind in FAULT_WEIGHTS if kind not in STORE_FAULTS or kind in own]
    if not (overlap and own):
        return _lane(rng, seconds, kinds, lease_ttl, supervisors, 0)
    return sorted(
        _lane(rng, seconds, [kind for kind in kinds if kind not in own], lease_ttl,
              supervisors, 0)
        + _lane(rng, seconds, list(own), lease_ttl, supervisors, 1),
        key=lambda fault: fault.at)


def _lane(rng: random.Random, seconds: float, kinds: list[str], lease_ttl: float,
          supervisors: int, lane: int) -> list[Fault]:
    ids, joiner = supervisor_ids(supervisors)
    weights = [FAULT_WEIGHTS[kind] for kind in kinds]
    faults = []
    at = rng.uniform(2.0, 5.0)
    while at < seconds - 5:
        kind = rng.choices(kinds, weights)[0]
        target = rng.choice(ids)
        if kind in STORE_FAULTS:
            target = "redis" if kind not in POSTGRES_FAULTS else "postgres"
        elif kind == "rolling_restart":
            target = "all"
        elif kind == "join_leave":
            target = joiner
        duration = {
            "kill_supervisor": rng.uniform(0.2, 3.0),  # down before its restart
            "freeze_supervisor": rng.uniform(lease_ttl + 0.5, 3 * lease_ttl),
            "freeze_group": rng.uniform(lease_ttl + 0.5, 3 * lease_ttl),
            "freeze_redis": rng.uniform(0.5, 2 * lease_ttl),
            "restart_redis": rng.uniform(0.2, 2.0),
            "redis_oom": rng.uniform(1.0, 4.0),
            "redis_readonly": rng.uniform(1.0, 4.0),
            "lose_writes": rng.uniform(0.5, 2.0),  # the replica cut off before the kill
            "join_leave": rng.uniform(4.0, 12.0),
        }.get(kind, 0.0)
        if kind in POSTGRES_FAULTS:  # drawn apart: the other stores' seeds plan as before
            low, high = {"freeze_postgres": (0.5, 2 * lease_ttl), "restart_postgres": (0.2, 2.0),
                         "refuse_postgres": (1.0, 4.0)}[kind]
            duration = rng.uniform(low, high)
        faults.append(Fault(round(at, 3), kind, target, round(duration, 3), lane))
        at += duration + rng.uniform(2.0, 8.0)
    return faults


def plan_work(rng: random.Random, seconds: float, run_id: str) -> list[Work]:
    """Dispatches until 10 s before the end; long-running jobs still live then are
    stopped by the driver's final phase, not here."""
    work: list[Work] = []
    long_ends: list[float] = []  # planned stop times (inf: stopped at the end)
    kinds = list(KIND_WEIGHTS)
    weights = [KIND_WEIGHTS[kind] for kind in kinds]
    counter = 0
    at = 0.0
    while at < seconds - 10:
        if counter < LONG_AT_START:
            kind = "long"
            at += 0.2
        else:
            kind = rng.choices(kinds, weights)[0]
            at += rng.expovariate(1 / DISPATCH_MEAN_GAP)
            if kind == "long" and sum(end > at for end in long_ends) >= MAX_LIVE_LONG:
                kind = "short"
        counter += 1
        key = f"{run_id}.{kind}-{counter}"
        work.append(Work(round(at, 3), "dispatch", key, kind, _payload(rng, kind)))
        if kind in ("stoppable", "async_stoppable"):
            work.append(Work(round(at + rng.uniform(0.5, 6.0), 3), "stop", key, kind))
        elif kind == "long":
            work += _long_life(rng, at, seconds, key, long_ends, notified=counter % 2 == 0)
    return sorted(work, key=lambda item: item.at)


def _payload(rng: random.Random, kind: str) -> dict[str, Any]:
    if kind in ("short", "async"):
        return {"seconds": round(rng.uniform(0.05, 1.5), 3)}
    if kind == "limited":  # long enough that the limit holds jobs back
        return {"seconds": round(rng.uniform(0.5, 2.5), 3)}
    if kind == "cpu":
        return {"seconds": round(rng.uniform(0.5, 3.0), 3)}
    if kind == "checkpointing":
        return {"steps": rng.randint(10, 50)}
    return {}


def _long_life(rng: random.Random, at: float, seconds: float, key: str,
               long_ends: list[float], *, notified: bool) -> list[Work]:
    """Its notes, and a stop mid-run for some."""
    work = []
    end = float("inf")
    if rng.random() < 0.3:
        end = at + rng.uniform(10.0, 40.0)
        if end < seconds - 5:
            work.append(Work(round(end, 3), "stop", key, "long"))
        else:
            end = float("inf")
    long_ends.append(end)
    if notified:
        last_note = min(end, seconds) - QUIET_BEFORE_STOP - 10
        note_at, n = at + 0.5, 0
        while note_at < last_note:
            n += 1
            work.append(Work(round(note_at, 3), "notify", key, "long", note=n))
            note_at += rng.uniform(1.0, 4.0)
    return work
