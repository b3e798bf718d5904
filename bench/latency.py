"""Dispatch-to-handler-start latency with idle capacity.

    python bench/latency.py [--samples 300] [--store redis|sqlite]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

from common import percentile, redis_server, supervisor

from supervisor import Client


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--store", choices=["redis", "sqlite"], default="redis")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="poolsup-latency-"))
    pool = f"bench-{uuid.uuid4().hex[:8]}"
    latencies: list[float] = []
    with redis_server() as redis_url:
        store = redis_url if args.store == "redis" else f"sqlite:///{directory}/pool.db"
        handlers = {"started": {"path": "noop.py", "function": "started", "timeout": 0}}
        with supervisor(directory, store, pool, handlers=handlers, capacity=4, lease_ttl=10):
            client = Client(store, pool=pool)
            for index in range(args.samples + 20):
                key = f"lat-{index}"
                sent = time.time()
                client.dispatch(key, None, handler="started")
                while (record := client.job(key))["state"] != "succeeded":
                    time.sleep(0.002)
                if index >= 20:  # warm-up
                    latencies.append(record["result"]["started"] - sent)
            client.close()
    p50 = percentile(latencies, 0.50) * 1000
    p99 = percentile(latencies, 0.99) * 1000
    print(f"store={args.store} samples={len(latencies)} dispatch_to_start_ms "
          f"p50={p50:.2f} p99={p99:.2f} max={max(latencies) * 1000:.2f}")


if __name__ == "__main__":
    main()
