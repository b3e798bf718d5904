"""What `[pool] wait_replicas = 1` costs per job: dispatch + claim + complete round trips
against a master with one replica on this machine, with wait_replicas 0 and 1, one job at
a time (latency, not throughput: WAIT holds only the connection that waits).

    python bench/wait_cost.py [--jobs 2000]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from supervisor.store.records import DispatchRequest
from supervisor.store.redis.store import RedisStore
from tests.helpers.redis_sentinel import cli
from tests.helpers.redis_server import RedisServer


async def per_job(url: str, wait_replicas: int, jobs: int) -> float:
    store = await RedisStore.open(url, f"wait-{uuid.uuid4().hex[:6]}",
                                  wait_replicas=wait_replicas)
    try:
        for warm in range(50):
            await store.dispatch(DispatchRequest(key=f"w{warm}", handler="h", payload=b"{}",
                                                 max_attempts=1))
        await store.claim("bench", ["h"], 50, 60, 3)
        started = time.perf_counter()
        for n in range(jobs):
            await store.dispatch(DispatchRequest(key=f"k{n}", handler="h", payload=b"{}",
                                                 max_attempts=1))
            (job,) = (await store.claim("bench", ["h"], 1, 60, 3)).jobs
            await store.complete(job.lease, b"{}")
        return (time.perf_counter() - started) / jobs
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=2000)
    args = parser.parse_args()
    master = RedisServer(args=("--repl-diskless-sync-delay", "0")).start()
    replica = RedisServer(args=("--replicaof", "127.0.0.1", str(master.port))).start()
    try:
        while "master_link_status:up" not in cli(replica.port, "INFO", "replication"):
            time.sleep(0.05)
        for wait_replicas in (0, 1, 0, 1):  # twice each, interleaved: the machine is noisy
            cost = anyio.run(per_job, master.url, wait_replicas, args.jobs)
            print(f"wait_replicas {wait_replicas}: {1000 * cost:.3f} ms per job "
                  f"(dispatch + claim + complete, one at a time)", flush=True)
    finally:
        replica.remove()
        master.remove()


if __name__ == "__main__":
    main()
