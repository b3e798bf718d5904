"""A supervisor's answer to `poolsup debug KEY` for a job it runs: the child's Python
thread stacks, or why there are none, written to the store for the asker."""

from __future__ import annotations

from typing import Any

import orjson

from supervisor.errors import StoreFailure
from supervisor.job.running import RunningJob
from supervisor.store.base import Store

# How long the child gets to answer: its reporter runs between two bytecodes of the
# main thread, at once unless that thread is inside C code.
STACKS_TIMEOUT = 2.0


async def answer_debug(store: Store, job: RunningJob, request: str, supervisor: str) -> None:
    answer: dict[str, Any] = {"supervisor": supervisor, "token": job.token,
                              "pid": job.child.pid if job.child is not None else None}
    if job.child is None:
        answer["error"] = "the job's child has not started yet"
    else:
        stacks = await job.thread_stacks(STACKS_TIMEOUT)
        if stacks is None:
            answer["error"] = (f"the job did not answer within {STACKS_TIMEOUT:g} s: its main "
                               "thread is blocked in C code (or holds the GIL), where Python "
                               "cannot look")
        else:
            answer["threads"] = stacks
    try:
        await store.answer_stacks(request, orjson.dumps(answer))
    except StoreFailure as error:
        job.log.warning("could not store the debug answer: %s", error.message)
