"""No-op jobs per second, each in a fresh process (or, with --max-jobs-per-child N,
up to N in one child), at a given capacity.

    python bench/throughput.py [--jobs 2000] [--capacity 4] [--store redis|sqlite]
                               [--max-jobs-per-child 1]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

from common import redis_server, supervisor

from supervisor import Client


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--capacity", type=int, default=4)
    parser.add_argument("--store", choices=["redis", "sqlite"], default="redis")
    parser.add_argument("--max-jobs-per-child", type=int, default=1)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="poolsup-throughput-"))
    pool = f"bench-{uuid.uuid4().hex[:8]}"
    with redis_server() as redis_url:
        store = redis_url if args.store == "redis" else f"sqlite:///{directory}/pool.db"
        client = Client(store, pool=pool)
        for index in range(args.jobs):
            client.dispatch(f"noop-{index}", None, handler="noop")
        handlers = {"noop": {"path": "noop.py", "timeout": 0,
                             "max_jobs_per_child": args.max_jobs_per_child}}
        began = time.monotonic()
        with supervisor(directory, store, pool, handlers=handlers, capacity=args.capacity,
                        lease_ttl=10):
            while client.status()["counts"]["succeeded"] < args.jobs:
                time.sleep(0.05)
            records = client.jobs(state="succeeded")
        elapsed_wall = time.monotonic() - began
        first = min(r["started_at"] for r in records)
        last = max(r["finished_at"] for r in records)
        client.close()
    rate = args.jobs / (last - first)
    print(f"store={args.store} capacity={args.capacity} jobs={args.jobs} "
          f"max_jobs_per_child={args.max_jobs_per_child} "
          f"jobs_per_s={rate:.0f} (first start to last finish {last - first:.2f} s; "
          f"wall incl. startup {elapsed_wall:.1f} s)")


if __name__ == "__main__":
    main()
