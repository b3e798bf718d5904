"""A job's way through poolsup's files, counted on the code: one no-op job run by a real
supervisor, traced with `sys.setprofile` from `job/runner.py:run_job` to its return.

    python bench/job_way.py [--max-jobs-per-child 1] [--store sqlite|redis] [--show]

What is traced: every call into (and return to) a function in `supervisor/` or
`sandbox/`, in the job's own context - its task, and the event-loop callbacks and tasks
it registered or started (asyncio copies the context into each), until its task lets
it go (`Registry.remove`, just after `run_job` returns). Not traced: the fork server's
and the child's side (other processes), and the supervisor's shared loops (the
claimer, the fork server client's reader), which serve every job at once.

Reduced to the sequence of files the job's way is in (consecutive repeats folded), it
prints:
  files entered      distinct files of the sequence (run_job's own included);
  returns            steps into a file the sequence was in before (not the step just
                     before): how often the way comes back to an earlier file;
  edges              distinct caller file -> callee file pairs.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

from common import HANDLERS, ROOT, redis_server  # noqa: F401 - ROOT puts the repo first

from tests.helpers.pool import wait_for, write_pool

OUR_DIRS = (str(ROOT / "supervisor") + os.sep, str(ROOT / "sandbox") + os.sep)


def ours(filename: str) -> str | None:
    if filename.startswith(OUR_DIRS):
        return os.path.relpath(filename, ROOT)
    return None


def serve(config: str, out: str, nth: int) -> None:
    """In the supervisor's process: trace the way of its `nth` job (in its task, until
    the task lets it go), then run `poolsup run`."""
    tracing: contextvars.ContextVar[bool] = contextvars.ContextVar("tracing", default=False)
    steps: list[tuple[str, str, str]] = []  # (event, file, function)
    state = {"seen": 0, "done": False}

    traced: list[object] = []  # the job traced

    def write() -> None:
        state["done"] = True
        Path(out).write_text(json.dumps(steps))

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if state["done"] or event not in ("call", "return"):
            return
        code = frame.f_code
        if event == "return" and code.co_name == "remove" and traced \
                and frame.f_locals.get("job") is traced[0] \
                and code.co_filename.endswith(os.path.join("job", "running.py")):
            # Its way ends as its task lets it go (the task may run the next job).
            write()
            return
        if not tracing.get():
            if event != "call" or code.co_name != "run_job" or \
                    not code.co_filename.endswith(os.path.join("job", "runner.py")):
                return
            state["seen"] += 1
            if state["seen"] != nth:
                return
            tracing.set(True)
            traced.append(frame.f_locals["job"])
        if event == "call":
            name = ours(code.co_filename)
            if name is not None:
                steps.append(("call", name, code.co_name))
            return
        back = frame.f_back
        if back is not None and ours(code.co_filename) is not None:
            name = ours(back.f_code.co_filename)
            if name is not None:
                steps.append(("return", name, back.f_code.co_name))

    sys.setprofile(profile)
    sys.argv = ["poolsup", "run", "-c", config]
    from supervisor.cli.main import main

    main()


def reduce(steps: list[tuple[str, str, str]]) -> dict[str, Any]:
    sequence: list[str] = []
    edges: set[tuple[str, str]] = set()
    for event, name, _ in steps:
        if sequence and sequence[-1] == name:
            continue
        if event == "call" and sequence:
            edges.add((sequence[-1], name))
        sequence.append(name)
    seen: set[str] = set()
    returns = 0
    for index, name in enumerate(sequence):
        if name in seen and (index == 0 or sequence[index - 1] != name):
            returns += 1
        seen.add(name)
    return {"files": sorted(seen), "returns": returns, "edges": sorted(edges),
            "sequence": sequence}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--max-jobs-per-child", type=int, default=1)
    parser.add_argument("--store", choices=["sqlite", "redis"], default="sqlite")
    parser.add_argument("--show", action="store_true", help="print the sequence")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], args.serve[1], int(args.serve[2]))
        return
    directory = Path(tempfile.mkdtemp(prefix="poolsup-job-way-"))
    out = directory / "steps.json"
    pool = f"way-{uuid.uuid4().hex[:8]}"
    store = f"sqlite:///{directory}/pool.db"
    config = write_pool(directory, store=store, pool=pool, capacity=1, lease_ttl=10,
                        handlers={"noop": {"path": str(HANDLERS / "noop.py"), "timeout": 0,
                                           "max_jobs_per_child": args.max_jobs_per_child}})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = (directory / "supervisor.log").open("wb")
    jobs = 2 if args.max_jobs_per_child > 1 else 1
    process = subprocess.Popen([sys.executable, __file__, "--serve", str(config), str(out),
                                str(jobs)],
                               stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        from supervisor import Client

        client = Client(store, pool=pool)
        # The first job warms the child up (max_jobs_per_child > 1: the second reuses it).
        for index in range(jobs):
            client.dispatch(f"way-{index}", None, handler="noop")
            wait_for(lambda index=index: client.job(f"way-{index}")["state"] == "succeeded",
                     30, message="the job to succeed")
        wait_for(out.exists, 10, message="the trace")
        client.close()
    finally:
        process.terminate()
        process.wait(30)
    steps = [tuple(step) for step in json.loads(out.read_text())]
    result = reduce(steps)  # type: ignore[arg-type]
    print(f"max_jobs_per_child={args.max_jobs_per_child}: files entered "
          f"{len(result['files'])}, returns to an earlier file {result['returns']}, "
          f"caller->callee file edges {len(result['edges'])}, steps {len(result['sequence'])}")
    # The stages alone: the job's own modules, without the small shared helpers.
    staged = reduce([step for step in steps if step[1].startswith("supervisor/job/")])
    print(f"  in supervisor/job/ alone: files {len(staged['files'])}, returns "
          f"{staged['returns']}, edges {len(staged['edges'])}")
    for name in result["files"]:
        print("  ", name)
    if args.show:
        print(" -> ".join(result["sequence"]))


if __name__ == "__main__":
    main()
