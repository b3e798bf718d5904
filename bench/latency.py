"""Dispatch-to-handler-start latency with idle capacity, and where it goes: the
dispatch call's return, the claim (the job's `started_at`, the store's clock at the
claim), and the handler's first line, each after the send (p50 / p99).

    python bench/latency.py [--samples 300] [--store redis|sqlite] [--max-jobs-per-child 1]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

from common import percentile, redis_server, supervisor

from supervisor import Client

STEPS = ("dispatch returned", "claimed", "handler started")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--store", choices=["redis", "sqlite"], default="redis")
    parser.add_argument("--max-jobs-per-child", type=int, default=1)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="poolsup-latency-"))
    pool = f"bench-{uuid.uuid4().hex[:8]}"
    steps: dict[str, list[float]] = {step: [] for step in STEPS}
    with redis_server() as redis_url:
        store = redis_url if args.store == "redis" else f"sqlite:///{directory}/pool.db"
        handlers = {"started": {"path": "noop.py", "function": "started", "timeout": 0,
                                "max_jobs_per_child": args.max_jobs_per_child}}
        with supervisor(directory, store, pool, handlers=handlers, capacity=4, lease_ttl=10):
            client = Client(store, pool=pool)
            for index in range(args.samples + 20):
                key = f"lat-{index}"
                sent = time.time()
                client.dispatch(key, None, handler="started")
                returned = time.time()
                while (record := client.job(key))["state"] != "succeeded":
                    time.sleep(0.002)
                if index >= 20:  # warm-up
                    for step, at in zip(STEPS, (returned, float(record["started_at"]),
                                                record["result"]["started"]), strict=True):
                        steps[step].append(at - sent)
            client.close()
    latencies = steps["handler started"]
    p50 = percentile(latencies, 0.50) * 1000
    p99 = percentile(latencies, 0.99) * 1000
    print(f"store={args.store} max_jobs_per_child={args.max_jobs_per_child} "
          f"samples={len(latencies)} dispatch_to_start_ms p50={p50:.2f} p99={p99:.2f} "
          f"max={max(latencies) * 1000:.2f}")
    print("after the send, ms (p50 / p99): " + ", ".join(
        f"{step} {percentile(values, 0.50) * 1000:.2f} / {percentile(values, 0.99) * 1000:.2f}"
        for step, values in steps.items()))


if __name__ == "__main__":
    main()
