"""A fresh child's CPU around its handler: from its fork to the handler's first line, and
from the handler's last line to its exit (a no-op handler, `noop.py:cpu_marks`).

    python bench/child_cost.py [--jobs 300] [--store sqlite|redis]

The handler reports the child's own CPU time (`time.process_time`, since its fork) at its
first and last lines; the children's whole CPU is what the fork server reaped of them
(psutil children_user + children_system of the fork server, over the run). Per child:
  before   = CPU at the first line (fork, become a job process, wait, confine, set up);
  after    = whole - CPU at the last line (report, flush, exit; the kernel's teardown
             counts too, as it is charged to the child).
and the minor page faults it took before the handler's first line: a forked child pays
for each page it writes first (copy on write), and most of its CPU is these.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import psutil
from common import redis_server, supervisor

from supervisor import Client


def reaped(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.children_user + times.children_system


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--store", choices=["redis", "sqlite"], default="redis")
    parser.add_argument("--sandbox", default="default")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="poolsup-child-cost-"))
    pool = f"child-{uuid.uuid4().hex[:8]}"
    with redis_server() as redis_url:
        store = redis_url if args.store == "redis" else f"sqlite:///{directory}/pool.db"
        client = Client(store, pool=pool)
        handlers = {"marks": {"path": "noop.py", "function": "cpu_marks", "timeout": 0,
                              "sandbox": args.sandbox}}
        with supervisor(directory, store, pool, handlers=handlers, capacity=1,
                        lease_ttl=10) as process:
            run = psutil.Process(process.pid)
            server = next(child for child in run.children()
                          if any("sandbox.forkserver" in part for part in child.cmdline()))
            client.dispatch("warm-up", None, handler="marks")
            while client.status()["counts"]["succeeded"] < 1:
                time.sleep(0.05)
            time.sleep(0.2)  # the children forked ahead wait: their start is counted below
            before = reaped(server)
            client.dispatch_many([{"key": f"marks-{index}", "handler": "marks",
                                   "payload": None} for index in range(args.jobs)])
            while client.status()["counts"]["succeeded"] < args.jobs + 1:
                time.sleep(0.05)
            time.sleep(0.2)
            whole = (reaped(server) - before) / args.jobs
            records = [client.job(f"marks-{index}")["result"] for index in range(args.jobs)]
        client.close()
    first = statistics.mean(record["first"] for record in records)
    last = statistics.mean(record["last"] for record in records)
    faults = statistics.mean(record["faults"] for record in records)
    print(f"sandbox={args.sandbox} jobs={args.jobs}: a fresh child's CPU "
          f"{1000 * whole:.2f} ms: before the handler {1000 * first:.2f} ms, the handler "
          f"{1000 * (last - first):.3f} ms, after it {1000 * (whole - last):.2f} ms; "
          f"{faults:.0f} minor page faults before the handler's first line")


if __name__ == "__main__":
    main()
