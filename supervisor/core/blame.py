"""Who pays for a fork server's death.

Without a sandbox a job can SIGKILL its fork server (its parent), and a SIGKILL
leaves no trace of who sent it.  What is known at the death is which jobs had a
child in the fork server and when each was forked; a job that kills it does so
while it runs, typically at once, so the job forked last is the likeliest culprit:

- The job forked last is BLAMED if no other job was forked within `together`
  seconds before it: its run ended with the death it most likely caused, and it
  spends its attempt (failed once its attempts are spent).
- Jobs forked last together (within `together` of each other) cannot be told
  apart: each is a SUSPECT, released without spending an attempt.  For `memory`
  seconds a suspect is forked alone: no other job within `together` before or after
  it (`spawn_wait`), so that its next run, if it kills again, is judged alone.  A
  suspect forked together with others all the same (on another host, which does not
  know the suspicion) is BLAMED, which bounds a culprit that keeps starting beside
  others.
- Every job forked earlier is a BYSTANDER: released without spending an attempt,
  as after a crash.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from supervisor.core.outcome import Fail, Outcome, Release

TOGETHER = 0.5
SUSPICION_MEMORY = 600.0
RELEASE_DELAY = 1.0  # as for a job whose child could not be started


class Blame(enum.Enum):
    BLAMED = "blamed"
    SUSPECT = "suspect"
    BYSTANDER = "bystander"


@dataclass(frozen=True)
class Verdict:
    blame: Blame


@dataclass(frozen=True)
class Judgement:
    verdicts: Mapping[str, Verdict]  # by job key
    suspected: Mapping[str, float]  # the suspicions to remember: key -> when


def judge_death(
    forked_at: Mapping[str, float],
    suspected: Mapping[str, float],
    now: float,
    *,
    together: float = TOGETHER,
    memory: float = SUSPICION_MEMORY,
) -> Judgement:
    """The verdict on each job (key -> when its child was forked) of a fork server
    that died at `now`, given the earlier `suspected` (key -> when)."""
    remembered = {key: at for key, at in suspected.items() if now - at <= memory}
    if not forked_at:
        return Judgement({}, remembered)
    last = max(forked_at.values())
    latest = sorted((key for key, at in forked_at.items() if last - at <= together),
                    key=lambda key: (forked_at[key], key))
    verdicts = {key: Verdict(Blame.BYSTANDER) for key in forked_at}
    if len(latest) == 1:
        verdicts[latest[0]] = Verdict(Blame.BLAMED)
        remembered.pop(latest[0], None)
        return Judgement(verdicts, remembered)
    for key in latest:
        if key in remembered:
            verdicts[key] = Verdict(Blame.BLAMED)
            del remembered[key]
        else:
            verdicts[key] = Verdict(Blame.SUSPECT)
            remembered[key] = now
    return Judgement(verdicts, remembered)


def is_suspect(
    key: str, suspected: Mapping[str, float], now: float, *, memory: float = SUSPICION_MEMORY
) -> bool:
    return key in suspected and now - suspected[key] <= memory


@dataclass(frozen=True)
class LastFork:
    at: float
    suspect: bool


def spawn_wait(
    key: str,
    suspected: Mapping[str, float],
    last: LastFork | None,
    now: float,
    *,
    together: float = TOGETHER,
    memory: float = SUSPICION_MEMORY,
) -> float:
    """Seconds to wait before forking `key`'s child: a suspect is never forked within
    `together` of another job, either way round."""
    if last is None or not (is_suspect(key, suspected, now, memory=memory) or last.suspect):
        return 0.0
    return max(0.0, last.at + together - now)


def outcome_after_death(outcome: Outcome, verdict: Verdict, how: str) -> Outcome:
    """What a job's run that ended with its fork server's death (`how` it died) comes
    to.  Only a child that died without a word is judged: a result, a handler's
    error, a limit, a timeout or a stop that came first stands."""
    if not (isinstance(outcome, Fail) and outcome.cause == "crash"):
        return outcome
    match verdict.blame:
        case Blame.BLAMED:
            return Fail(f"the fork server died under it ({how})", final=False,
                        cause="fork server")
        case Blame.SUSPECT:
            return Release(f"its fork server died ({how}) while it and other jobs had just "
                           "started", delay=RELEASE_DELAY)
    return Release(f"its fork server died ({how}) under another job", delay=RELEASE_DELAY)
