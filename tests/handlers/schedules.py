"""Handlers for schedule tests.  The producer reads the plan to return from a JSON file
named in its payload, so a test can change the plan between ticks."""

import json
import time

from sandbox import EndSchedule, Snooze


def from_file(job):
    with open(job.payload["plan_file"]) as file:
        plan = json.load(file)
    if plan.get("started_file"):  # says that the producer runs, then takes its time
        open(plan.pop("started_file"), "w").close()
        time.sleep(plan.pop("sleep", 0))
    if plan.get("raise"):
        raise RuntimeError("the feed list is unreachable")
    if plan.get("end"):
        raise EndSchedule()
    if plan.get("snooze"):
        raise Snooze(60)
    if plan.get("garbage"):
        return ["not", "a", "plan"]
    return plan


def wall_clock(job):
    """When the job started, by the wall clock (delayed jobs are due by it)."""
    return time.time()


def follow(job):
    """A long-running job: runs until it is asked to stop."""
    while not job.wait_stop(1.0):
        pass
    return {"stopped_for": job.stop_reason}
