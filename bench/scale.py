"""The control plane at scale: many supervisors holding many running (idle) jobs on one
redis-server, measured from outside.

    python bench/scale.py [--supervisors 16] [--jobs 4096] [--seconds 30]

Reports: how long until every job runs after the dispatch; each supervisor's CPU (mean
and max, % of one core) and redis-server's over `--seconds` of steady state; the wall
time of `poolsup status --json` (median of 3); and a supervisor that joins: how long
until it holds its capacity-weighted share (within one job).  Every supervisor has
capacity jobs / supervisors; the handler sleeps until stopped and may be moved.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
from common import redis_server, supervisor

from supervisor import Client

HANDLERS = {"sleeper": {"path": "sleeper.py", "timeout": 0, "rebalance": True}}


def redis_process(url: str) -> psutil.Process:
    port = url.rsplit(":", 1)[1].split("/")[0]
    for process in psutil.process_iter(["name", "cmdline"]):
        if process.info["name"] == "redis-server" and port in " ".join(process.info["cmdline"]):
            return process
    raise SystemExit(f"no redis-server on port {port}")


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def wait_until(predicate, timeout: float, what: str) -> float:  # type: ignore[no-untyped-def]
    began = time.monotonic()
    while not predicate():
        if time.monotonic() - began > timeout:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--supervisors", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=4096)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--lease-ttl", type=float, default=10.0)
    args = parser.parse_args()
    capacity = -(-args.jobs // args.supervisors)
    directory = Path(tempfile.mkdtemp(prefix="poolsup-scale-"))
    pool = f"bench-{uuid.uuid4().hex[:8]}"
    settings = {"capacity": capacity, "lease_ttl": args.lease_ttl, "stop_grace": 5}
    with redis_server() as url, contextlib.ExitStack() as stack:
        redis = redis_process(url)
        members = [stack.enter_context(supervisor(directory, url, pool, handlers=HANDLERS,
                                                  name=f"s{n}.toml", id=f"s{n}", **settings))
                   for n in range(args.supervisors)]
        client = Client(url, pool=pool)
        stack.callback(client.close)
        began = time.monotonic()
        for index in range(args.jobs):
            client.dispatch(f"sleep-{index}", {"seconds": 3600}, handler="sleeper")
        dispatched = time.monotonic() - began

        def running() -> int:
            return int(client.status()["counts"]["running"])

        all_running = wait_until(lambda: running() >= args.jobs, 900, "every job running")
        time.sleep(5)  # let the start-up burst settle
        processes = [psutil.Process(member.pid) for member in members]
        before = [cpu_seconds(process) for process in processes]
        redis_before = cpu_seconds(redis)
        time.sleep(args.seconds)
        used = [cpu_seconds(process) - start for process, start in zip(processes, before,
                                                                          strict=True)]
        redis_used = cpu_seconds(redis) - redis_before
        config = directory / "s0.toml"
        status_times = []
        for _ in range(3):
            start = time.monotonic()
            subprocess.run([sys.executable, "-m", "supervisor.cli", "status", "-c", str(config),
                            "--json"], check=True, capture_output=True)
            status_times.append(time.monotonic() - start)
        joining = stack.enter_context(supervisor(directory, url, pool, handlers=HANDLERS,
                                                 name="joiner.toml", id="joiner", **settings))
        share = args.jobs // (args.supervisors + 1)

        def joiner_holds() -> int:
            for member in client.status()["supervisors"]:
                if member["id"] == "joiner":
                    return int(member["running"])
            return 0

        joined = wait_until(lambda: joiner_holds() >= share - 1, 600, "the joiner's share")
        percent = [100 * seconds / args.seconds for seconds in used]
        print(f"{args.supervisors} supervisors x capacity {capacity}, {args.jobs} jobs, "
              f"lease_ttl {args.lease_ttl:g} s")
        print(f"dispatch {dispatched:.1f} s; every job running {all_running:.1f} s after it")
        print(f"steady state over {args.seconds:.0f} s: each supervisor "
              f"{statistics.mean(percent):.1f}% of a core (max {max(percent):.1f}%), "
              f"redis-server {100 * redis_used / args.seconds:.1f}%")
        print(f"poolsup status --json: {statistics.median(status_times):.2f} s (median of 3)")
        print(f"a joining supervisor held its share ({share - 1}+ jobs) {joined:.1f} s after "
              "it served", flush=True)
        for member in [*members, joining]:  # drain them side by side, not one by one
            with contextlib.suppress(ProcessLookupError):
                os.kill(member.pid, signal.SIGTERM)


if __name__ == "__main__":
    main()
