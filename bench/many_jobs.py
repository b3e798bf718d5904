"""One host holding many running jobs: the supervisor's own CPU while they run.

    python bench/many_jobs.py [--jobs 1000] [--seconds 30] [--store redis|sqlite]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

import psutil
from common import redis_server, supervisor

from supervisor import Client


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--store", choices=["redis", "sqlite"], default="redis")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="poolsup-many-"))
    pool = f"bench-{uuid.uuid4().hex[:8]}"
    with redis_server() as redis_url:
        store = redis_url if args.store == "redis" else f"sqlite:///{directory}/pool.db"
        handlers = {"sleeper": {"path": "sleeper.py", "timeout": 0}}
        with supervisor(directory, store, pool, handlers=handlers, capacity=args.jobs,
                        lease_ttl=10, stop_grace=30) as sup:
            client = Client(store, pool=pool)
            for index in range(args.jobs):
                client.dispatch(f"sleep-{index}", {"seconds": args.seconds + 120},
                                handler="sleeper")
            began = time.monotonic()
            while client.status()["counts"]["running"] < args.jobs:
                time.sleep(0.5)
                if time.monotonic() - began > 300:
                    raise SystemExit("jobs did not all start")
            ramp = time.monotonic() - began
            time.sleep(5)  # let the start-up burst settle
            process = psutil.Process(sup.pid)
            before = process.cpu_times()
            time.sleep(args.seconds)
            after = process.cpu_times()
            rss = process.memory_info().rss
            status = client.status()
            client.close()
    used = (after.user - before.user) + (after.system - before.system)
    print(f"store={args.store} running={status['counts']['running']} jobs (all claimed in "
          f"{ramp:.1f} s); supervisor CPU {100 * used / args.seconds:.1f}% of one core over "
          f"{args.seconds:.0f} s; supervisor RSS {rss / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
