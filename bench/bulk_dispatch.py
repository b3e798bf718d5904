"""Bulk dispatch: 10,000 no-op jobs added with poolsup's `client.dispatch_many`, RQ's
`Queue.enqueue_many` and Celery's `group(...).apply_async()`, on one private redis-server,
in one run.  Only the adding is timed (nothing runs the jobs); each system first adds a
small warm-up batch (connections made, scripts loaded), then `--rounds` batches of
`--jobs`, each into a fresh queue or pool; the median round is reported.  The timed part
includes building each system's items (poolsup's dicts, RQ's `prepare_data`, Celery's
signatures).

    python bench/bulk_dispatch.py [--jobs 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable
from importlib.metadata import version

import peers_tasks
from common import redis_server

from supervisor import Client

WARMUP = 100


Add = Callable[[int], float]  # adds `count` jobs; the seconds the adding took


def poolsup_adder(url: str) -> Add:
    def add(count: int) -> float:
        with Client(url, pool=f"bulk-{uuid.uuid4().hex[:8]}") as client:
            client.status()  # connected before the clock starts, as the others are
            started = time.perf_counter()
            results = client.dispatch_many(
                {"key": f"job-{i}", "handler": "noop", "payload": {}} for i in range(count))
            took = time.perf_counter() - started
        assert all(result["added"] for result in results)
        return took

    return add


def rq_adder(url: str) -> Add:
    from redis import Redis
    from rq import Queue

    connection = Redis.from_url(url)

    def add(count: int) -> float:
        queue = Queue(f"bulk-{uuid.uuid4().hex[:8]}", connection=connection)
        started = time.perf_counter()
        jobs = queue.enqueue_many([Queue.prepare_data(peers_tasks.NOOP) for _ in range(count)])
        took = time.perf_counter() - started
        assert len(jobs) == count
        return took

    return add


def celery_adder(url: str) -> Add:
    from celery import group

    app = peers_tasks.celery_app(url)

    def add(count: int) -> float:
        queue = f"bulk-{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        result = group(app.signature(peers_tasks.NOOP) for _ in range(count)).apply_async(
            queue=queue)
        took = time.perf_counter() - started
        assert len(result.results) == count
        return took

    return add


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    timed: dict[str, list[float]] = {}
    with redis_server() as url:
        adders = {"poolsup dispatch_many": poolsup_adder(url),
                  "rq enqueue_many": rq_adder(url),
                  "celery group.apply_async": celery_adder(url)}
        for name, add in adders.items():
            add(WARMUP)
            timed[name] = [add(args.jobs) for _ in range(args.rounds)]
    print(f"{args.jobs} no-op jobs added in one call, median of {args.rounds} round(s) "
          f"(rq {version('rq')}, celery {version('celery')}, {os.cpu_count()} cores)")
    print(f"{'system':<26} {'seconds':>8} {'jobs/s':>9}")
    for name, rounds in timed.items():
        seconds = statistics.median(rounds)
        print(f"{name:<26} {seconds:>8.3f} {args.jobs / seconds:>9.0f}")


if __name__ == "__main__":
    main()
