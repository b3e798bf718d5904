"""The supervisor's CPU per no-op job, alone (no peers, a few seconds): its process's
user+system time (psutil) while it runs `--jobs` jobs dispatched ahead, divided by
the jobs; its start is not counted (it is printed apart). Robust on a busy machine,
unlike a rate. The fork server's own CPU (not its children's) is read the same way,
beside it.

    python bench/supervisor_cpu.py [--jobs 1000] [--max-jobs-per-child 1] [--capacity 2]
                                   [--store redis|sqlite] [--profile out.txt]

With --profile, py-spy records the supervisor meanwhile (raw, for flame graphs or
`sort | tail`), sampling only while it holds the GIL (--gil): a send that wakes the fork
server or Redis on a busy machine waits in the kernel, which a wall-clock sample would
count as the send's cost.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import psutil
from common import redis_server, supervisor

from supervisor import Client


def cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--capacity", type=int, default=2)
    parser.add_argument("--max-jobs-per-child", type=int, default=1)
    parser.add_argument("--store", choices=["redis", "sqlite"], default="redis")
    parser.add_argument("--profile", help="py-spy's raw output file")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="poolsup-supervisor-cpu-"))
    pool = f"cpu-{uuid.uuid4().hex[:8]}"
    with redis_server() as redis_url:
        store = redis_url if args.store == "redis" else f"sqlite:///{directory}/pool.db"
        client = Client(store, pool=pool)
        handlers = {"noop": {"path": "noop.py", "timeout": 0,
                             "max_jobs_per_child": args.max_jobs_per_child}}
        with supervisor(directory, store, pool, handlers=handlers, capacity=args.capacity,
                        lease_ttl=10) as process:
            run = psutil.Process(process.pid)
            started = cpu(run)  # its start, to ready: imports, store, fork server
            fork_server = next(child for child in run.children()
                               if "sandbox.forkserver" in child.cmdline())
            client.dispatch_many([{"key": f"noop-{index}", "handler": "noop", "payload": None}
                                  for index in range(args.jobs)])
            spy = None
            if args.profile:
                spy = subprocess.Popen(["py-spy", "record", "-o", args.profile, "-f", "raw",
                                        "--pid", str(process.pid), "--nonblocking",
                                        "--gil", "--rate", "500"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            before, forks_before, began = cpu(run), cpu(fork_server), time.monotonic()
            while client.status()["counts"]["succeeded"] < args.jobs:
                time.sleep(0.05)
            used, elapsed = cpu(run) - before, time.monotonic() - began
            forks_used = cpu(fork_server) - forks_before
            if spy is not None:
                spy.send_signal(2)
                spy.wait(30)
        client.close()
    print(f"store={args.store} max_jobs_per_child={args.max_jobs_per_child} "
          f"capacity={args.capacity} jobs={args.jobs}: supervisor CPU "
          f"{1000 * used / args.jobs:.2f} ms per job, fork server "
          f"{1000 * forks_used / args.jobs:.2f} ms per job ({elapsed:.1f} s); its start "
          f"took {1000 * started:.0f} ms of CPU")


if __name__ == "__main__":
    main()
