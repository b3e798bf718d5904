"""The chaos run's checker: a pure verdict over what the run left behind (the ledger's
runs, what the process monitor saw, the driver's own record of what it did, the store's
final job records).  It knows nothing of processes or stores; tests feed it small
synthetic histories.

A process's life, as far as anyone can prove it: it surely lived from its start line to
`proven_end` (its last ledger line, or the last time the monitor saw it in /proc, the
later one).  After that it was dead or alive until `gone_by` (the first time the monitor
found it gone; unknown if it never looked).  Another process of the key starting before
`proven_end` is a proven overlap: a violation.  One starting between `proven_end` and
`gone_by` is an uncertain window: the process may have died at once (SIGKILL writes no
end line), so it is counted and reported, not failed.  A reused child (`--reuse`) outlives
its jobs: a run there that wrote its end line ended with it.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.ledger import ProcessFate, Run

FINISHED = ("succeeded", "failed", "stopped")
LONG = "long"
# The kind of job whose handler has `max_running` = LIMITED_MAX_RUNNING (check 9).
LIMITED = "limited"
LIMITED_MAX_RUNNING = 2
# Handler exits that are not a failure: a move or a drain released the job.
RELEASES = ("stop:rebalance", "stop:drain")


@dataclass(frozen=True)
class Note:
    n: int
    sent_at: float
    ambiguous: bool = False  # the notify call failed and was retried: it may be stored twice


@dataclass(frozen=True)
class Kill:
    """A SIGKILL of a supervisor, and the keys it ran just before."""

    supervisor: str
    at: float
    keys: tuple[str, ...]


@dataclass(frozen=True)
class Freeze:
    """A SIGSTOP of a supervisor (or of its process group), and the keys it ran just
    before: its leases run out as if it had died."""

    supervisor: str
    at: float
    keys: tuple[str, ...]


# Slack between the driver's clock and the store's, both of this host.
CLOCK_SLACK = 1.0
# How long before a counted loss its run began, when its `started` event is gone.
OUTAGE_TO_LOSS = 30.0


@dataclass(frozen=True)
class Drain:
    supervisor: str
    exit_code: int | None  # None: it did not exit in time
    # A store fault was on during the drain: then exit 1 (an outcome left to the store's
    # recovery, as docs/store-failures.md says) is allowed.
    store_fault: bool = False
    at: float | None = None  # when it began (None: not known)


@dataclass
class History:
    runs: list[Run] = field(default_factory=list)
    fates: dict[int, ProcessFate] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)  # every dispatched key
    stops: dict[str, float] = field(default_factory=dict)  # keys the driver stopped
    notes: dict[str, list[Note]] = field(default_factory=dict)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # the store's, at the end
    leftovers: list[str] = field(default_factory=list)  # job processes alive at the end
    faults: list[str] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    freezes: list[Freeze] = field(default_factory=list)
    # The wall clock (the store's times) minus the clock of `at` and the ledger's.
    wall_minus_boot: float = 0.0
    drains: list[Drain] = field(default_factory=list)
    # per schedule: name, every, fires, skipped, missed, ticks (see check_schedule_ticks)
    schedule_ticks: list[dict[str, Any]] = field(default_factory=list)
    # the handlers whose jobs ran in reused (`--reuse`) or shared (child_concurrency) children
    reused_handlers: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Violation:
    kind: str
    message: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.message}"


@dataclass
class Report:
    violations: list[Violation]
    counts: dict[str, Any]

    @property
    def ok(self) -> bool:
        return not self.violations


def ended_in_a_reused_child(run: Run, history: History) -> bool:
    """A run of a handler with reused children that wrote its end line: its process
    lives on, idle or running other jobs, and its own run ended with that line (the
    handler's last act, after its threads were joined).  A key the driver did not
    dispatch (a schedule's tick) is known by its run's kind, its handler's name."""
    handler = history.kinds.get(run.key, run.kind)
    return run.ended is not None and handler in history.reused_handlers


def proven_end(run: Run, history: History) -> float:
    if ended_in_a_reused_child(run, history):
        return run.last_line
    fate = history.fates.get(run.pid)
    if fate is None or fate.last_alive is None:
        return run.last_line
    return max(run.last_line, fate.last_alive)


def gone_by(run: Run, history: History) -> float:
    if ended_in_a_reused_child(run, history):
        return run.last_line
    fate = history.fates.get(run.pid)
    return math.inf if fate is None or fate.dead_at is None else fate.dead_at


def runs_by_key(runs: list[Run]) -> dict[str, list[Run]]:
    by_key: dict[str, list[Run]] = defaultdict(list)
    for run in sorted(runs, key=lambda run: run.started):
        by_key[run.key].append(run)
    return by_key


def _who(run: Run) -> str:
    return f"pid {run.pid} (token {run.token})"


def check_overlaps(history: History, uncertain: list[float]) -> list[Violation]:
    """1. One execution at a time.  Appends to `uncertain`, for each start inside
    another process's uncertain window, the longest the two may have overlapped (s)."""
    violations = []
    for key, runs in runs_by_key(history.runs).items():
        for earlier, later in itertools.combinations(runs, 2):
            end = proven_end(earlier, history)
            if later.started < end:
                violations.append(Violation("overlap", (
                    f"key {key}: {_who(earlier)} was alive {1000 * (end - later.started):.0f} ms "
                    f"after {_who(later)} started")))
            elif later.started < gone_by(earlier, history):
                uncertain.append(gone_by(earlier, history) - later.started)
    return violations


def check_tokens(history: History) -> list[Violation]:
    """2. Every start of a key has a greater token than the starts before it."""
    violations = []
    for key, runs in runs_by_key(history.runs).items():
        for earlier, later in itertools.pairwise(runs):
            if later.token <= earlier.token:
                violations.append(Violation("token", (
                    f"key {key}: {_who(later)} started after {_who(earlier)} "
                    f"with a token that does not grow")))
    return violations


def check_outcomes(history: History) -> list[Violation]:
    """3. Nothing lost: every dispatched job ended succeeded, failed with an error, or
    stopped by the driver."""
    violations = []
    for key, kind in sorted(history.kinds.items()):
        record = history.records.get(key)
        if record is None:
            violations.append(Violation("outcome", f"{kind} job {key}: lost (no record)"))
            continue
        state = record["state"]
        if state not in FINISHED:
            violations.append(Violation("outcome", f"{kind} job {key}: still {state}"))
        elif state == "failed" and not record.get("error"):
            violations.append(Violation("outcome", f"{kind} job {key}: failed without an error"))
        elif state == "stopped" and key not in history.stops:
            violations.append(Violation("outcome", (
                f"{kind} job {key}: stopped, but nobody stopped it")))
    return violations


def check_long_running(history: History) -> list[Violation]:
    """4. A long-running job is ended only by a user's stop, or by its lease-loss limit
    when every counted loss followed a kill or freeze of the supervisor that held it
    (as for a job that crashes its host: guarantee 2 allows that ending)."""
    violations = []
    runs = runs_by_key(history.runs)
    for key in sorted(key for key, kind in history.kinds.items() if kind == LONG):
        state = history.records.get(key, {}).get("state")
        if state in ("succeeded", "failed"):
            error = history.records[key].get("error")
            unexplained = unexplained_losses(history, key)
            if state == "failed" and unexplained == []:
                continue
            why = ""
            if state == "failed" and unexplained:
                why = ("; its counted lease losses at " + ", ".join(unexplained)
                       + " follow no kill or freeze of their holder")
            violations.append(Violation("long", (
                f"long-running job {key} ended {state} ({error or 'no error'}), not by a "
                f"stop{why}")))
        for run in runs.get(key, []):
            if run.ended is not None and run.ended not in (*RELEASES, "stop:stop"):
                violations.append(Violation("long", (
                    f"long-running job {key}: {_who(run)} ended by {run.ended!r}")))
    return violations


def unexplained_losses(history: History, key: str) -> list[str] | None:
    """For a job failed by its lease-loss limit: what its counted lease losses leave
    unexplained (empty: the ending was earned).  A loss is explained by an outage of its
    holder during the run (from its `started` event to the loss): a kill, a freeze, or
    a drain that did not exit 0 (a drain during a store fault may leave its leases to
    run out).  None if the job did not fail that way."""
    record = history.records.get(key, {})
    limit = re.match(r"lease lost \d+ times \(limit (\d+)\)", str(record.get("error") or ""))
    if limit is None:
        return None
    events = record.get("events", [])
    started = {event["token"]: event["at"] for event in events if event.get("event") == "started"}
    outages = [(outage.supervisor, outage.at) for outage in (*history.kills, *history.freezes)]
    outages += [(drain.supervisor, drain.at) for drain in history.drains
                if drain.exit_code != 0 and drain.at is not None]
    counted = [event for event in events if event.get("event") == "lease_lost"
               and str(event.get("detail", "")).startswith("counted")]
    unexplained = []
    for event in counted:
        lost_at = event["at"] - history.wall_minus_boot
        held_from = started.get(event["token"], event["at"] - OUTAGE_TO_LOSS) \
            - history.wall_minus_boot
        if not any(supervisor == event["supervisor"]
                   and held_from - CLOCK_SLACK <= at <= lost_at + CLOCK_SLACK
                   for supervisor, at in outages):
            unexplained.append(f"{event['at']} ({event['supervisor']})")
    if len(counted) < int(limit[1]):
        unexplained.append(f"{int(limit[1]) - len(counted)} not in its events")
    return unexplained


def failed_by_outages(history: History) -> int:
    return sum(history.kinds.get(key) == LONG and record.get("state") == "failed"
               and unexplained_losses(history, key) == []
               for key, record in history.records.items())


def check_notes(history: History) -> list[Violation]:
    """5. Each run takes its notes in increasing order (a note whose notify was retried
    may come twice in a row), and every note sent before the job's last sign of life was
    taken by some run."""
    violations = []
    by_key = runs_by_key(history.runs)
    for key, sent in sorted(history.notes.items()):
        runs = by_key.get(key, [])
        may_repeat = {note.n for note in sent if note.ambiguous}
        for run in runs:
            for before, after in itertools.pairwise(run.notes):
                if after < before or (after == before and after not in may_repeat):
                    violations.append(Violation("notes", (
                        f"key {key}: {_who(run)} took note {after} after note {before}")))
        taken = {n for run in runs for n in run.notes}
        last_sign = max((run.last_line for run in runs), default=-math.inf)
        if runs and unexplained_losses(history, key) == []:
            last_sign = runs[-1].started  # its last run was cut short by its holder's outage
        lost = [note.n for note in sent if note.sent_at < last_sign and note.n not in taken]
        if lost:
            violations.append(Violation("notes", (
                f"key {key}: notes {lost} were sent before its last run ended "
                f"and no run took them")))
    return violations


def check_leftovers(history: History) -> list[Violation]:
    """6. No job process outlives its job."""
    return [Violation("orphan", f"job process left running at the end: {leftover}")
            for leftover in history.leftovers]


def check_drains(history: History) -> list[Violation]:
    """Guarantee 6: a drain exits 0 (or 1 while the store failed)."""
    return [Violation("drain", (
        f"supervisor {drain.supervisor} drained with exit code {drain.exit_code}"
        if drain.exit_code is not None else
        f"supervisor {drain.supervisor} did not exit in time after SIGTERM"))
        for drain in history.drains
        if drain.exit_code != 0 and not (drain.store_fault and drain.exit_code == 1)]


def check_checkpoints(history: History) -> list[Violation]:
    """A run resumes from a checkpoint an earlier run of its key saved (or none)."""
    violations = []
    for key, runs in runs_by_key(history.runs).items():
        for index, run in enumerate(runs):
            saved_before = [value for earlier in runs[:index] for value in earlier.saves]
            if run.resumed is not None and run.resumed not in saved_before:
                violations.append(Violation("checkpoint", (
                    f"key {key}: {_who(run)} resumed from {run.resumed}, "
                    f"which no earlier run saved")))
    return violations


def check_schedule_ticks(history: History) -> list[Violation]:
    """7. Each tick of a schedule fired once, and none lost.  `history.schedule_ticks`
    holds, per schedule (read once every supervisor had stopped): `every`, the store's
    `fires`, `skipped` and `missed`, and the tick times of its jobs (one job key per
    tick).  A tick fired twice shows as a skip (its key still live) or as more fires
    than tick keys (a finished key dispatched again); a tick lost is one between the
    first and the last fired that is neither a job nor counted missed (missed: ticks
    no supervisor could fire, the store being down)."""
    violations = []
    for schedule in history.schedule_ticks:
        name, ticks = schedule["name"], sorted(schedule["ticks"])
        if schedule["skipped"]:
            violations.append(Violation("tick-twice", (
                f"schedule {name}: {schedule['skipped']} tick(s) fired while their own "
                f"job was live")))
        if schedule["fires"] != len(ticks) + schedule["skipped"]:
            violations.append(Violation("tick-twice", (
                f"schedule {name}: {schedule['fires']} fires for {len(ticks)} ticks")))
        if len(ticks) >= 2:
            expected = round((ticks[-1] - ticks[0]) / schedule["every"]) + 1
            lost = expected - len(ticks) - schedule["missed"]
            if lost:
                violations.append(Violation("tick-lost", (
                    f"schedule {name}: {expected} ticks from the first fired to the last, "
                    f"{len(ticks)} fired and {schedule['missed']} recorded missed")))
    return violations


def check_max_running(history: History) -> list[Violation]:
    """8. Never more than max_running processes of the limited handler alive at once
    (proven lives only: from a start to its proven end)."""
    lives = sorted((run.started, proven_end(run, history), run)
                   for run in history.runs if history.kinds.get(run.key) == LIMITED)
    violations = []
    for started, _end, run in lives:
        alive = [other for begin, end, other in lives if begin <= started < end]
        if len(alive) > LIMITED_MAX_RUNNING:
            violations.append(Violation("max_running", (
                f"{len(alive)} {LIMITED} jobs alive at once (limit {LIMITED_MAX_RUNNING}) "
                f"when {_who(run)} of {run.key} started: "
                + ", ".join(f"{other.key} {_who(other)}" for other in alive))))
    return violations


CHECKS: tuple[Callable[[History], list[Violation]], ...] = (
    check_tokens, check_outcomes, check_long_running, check_notes, check_leftovers,
    check_drains, check_checkpoints, check_schedule_ticks, check_max_running,
)


def failover_times(history: History) -> list[tuple[float, str]]:
    """(seconds, key) from each supervisor SIGKILL to each of its keys running again."""
    by_key = runs_by_key(history.runs)
    times = []
    for kill in history.kills:
        for key in kill.keys:
            later = [run.started for run in by_key.get(key, []) if run.started > kill.at]
            if later:
                times.append((min(later) - kill.at, key))
    return times


def child_exits_after_kills(history: History) -> list[float]:
    """Seconds from each supervisor SIGKILL to the exit of each job process it ran (as
    the pidfd told it: an upper bound)."""
    by_key = runs_by_key(history.runs)
    return [gone_by(run, history) - kill.at
            for kill in history.kills for key in kill.keys for run in by_key.get(key, [])
            if run.started < kill.at <= gone_by(run, history)]


def moves(history: History) -> Counter[str]:
    """Long-running jobs started again after a run that ended without failing, by why
    that run ended."""
    counted: Counter[str] = Counter()
    for key, runs in runs_by_key(history.runs).items():
        if history.kinds.get(key) != LONG:
            continue
        for earlier, later in itertools.pairwise(runs):
            if earlier.ended in RELEASES and later.token > earlier.token:
                counted[earlier.ended.removeprefix("stop:")] += 1
    return counted


def _milliseconds(seconds: float) -> int | str:
    return "unknown" if math.isinf(seconds) else round(1000 * seconds)


def check(history: History) -> Report:
    uncertain: list[float] = []
    violations = check_overlaps(history, uncertain)
    for one_check in CHECKS:
        violations += one_check(history)
    failovers = failover_times(history)
    counts: dict[str, Any] = {
        "jobs by kind": dict(Counter(history.kinds.values())),
        "outcomes": dict(Counter(
            f"{kind}:{history.records.get(key, {}).get('state', 'missing')}"
            for key, kind in history.kinds.items())),
        "faults by kind": dict(Counter(history.faults)),
        "executions": len(history.runs),
        "drains with exit 1 during a store fault": sum(
            drain.store_fault and drain.exit_code == 1 for drain in history.drains),
        "moves": dict(moves(history)),
        "long jobs failed by their holders' outages": failed_by_outages(history),
        "notes sent": sum(len(notes) for notes in history.notes.values()),
        "uncertain windows": len(uncertain),
        "largest possible overlap ms": _milliseconds(max(uncertain, default=0.0)),
        "largest failover s": round(max(failovers, default=(0.0, ""))[0], 3),
        "slowest child exit after a supervisor SIGKILL s": round(
            max(child_exits_after_kills(history), default=0.0), 3),
        "schedule ticks fired / missed": [
            (len(schedule["ticks"]), schedule["missed"]) for schedule in history.schedule_ticks],
        "violations": dict(Counter(violation.kind for violation in violations)),
    }
    return Report(violations, counts)


def render(report: Report) -> str:
    lines = [f"{name}: {value}" for name, value in report.counts.items()]
    lines += [str(violation) for violation in report.violations]
    lines.append("OK: no violation" if report.ok else
                 f"FAILED: {len(report.violations)} violation(s)")
    return "\n".join(lines)
