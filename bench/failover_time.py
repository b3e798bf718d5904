"""How long jobs stop starting when the Redis master behind Sentinel dies.

A master, replicas and three sentinels on this machine (tests/helpers/redis_sentinel.py:
down-after 1 s, failover-timeout 3 s), one supervisor.  The master is SIGKILLed; a job
is dispatched at once (the client retries until the new master takes it) and the time
from the kill to its start (its record's started_at, the store's clock, same host) is
the figure.  It adds Sentinel's promotion, the clients finding the new master, and the
lock-delay (the pool's longest lease_ttl + 1 s from the first claim on the new master).
With wait_replicas = 1 the setup has two replicas, so that one is left to acknowledge
after the promotion (with one replica, nothing starts until the old master is back as a
replica).

    python bench/failover_time.py [--lease-ttl 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from supervisor import Client
from supervisor.errors import PoolsupError
from tests.helpers.pool import SupervisorProcess, write_pool
from tests.helpers.redis_sentinel import SentinelSetup


def one_round(lease_ttl: float, wait_replicas: int, directory: Path) -> float:
    setup = SentinelSetup(replicas=1 + wait_replicas).start()
    pool = f"bench-{uuid.uuid4().hex[:6]}"
    config = write_pool(directory, store=setup.url, pool=pool,
                        handlers={"echo": {"path": "basic.py", "function": "echo"}},
                        id="bench", capacity=4, lease_ttl=lease_ttl)
    config.write_text(config.read_text().replace(
        "[pool]\n", f"[pool]\nwait_replicas = {wait_replicas}\n", 1))
    supervisor = SupervisorProcess(config, directory / f"{pool}.log").start()
    client = Client(setup.url, pool=pool, wait_replicas=wait_replicas)
    try:
        supervisor.wait_serving()
        client.dispatch("before", {}, handler="echo")
        client.wait("before", timeout=30)
        os.kill(setup.master.pid, signal.SIGKILL)
        killed_at = time.time()
        while True:
            try:
                client.dispatch("after", {}, handler="echo")
                break
            except PoolsupError:
                time.sleep(0.05)
        record = client.wait("after", timeout=120)
        return float(record["started_at"]) - killed_at
    finally:
        client.close()
        supervisor.kill()
        setup.remove()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lease-ttl", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="poolsup-failover-"))
    for wait_replicas in (0, 1):
        times = [one_round(args.lease_ttl, wait_replicas, directory)
                 for _ in range(args.rounds)]
        print(f"lease_ttl {args.lease_ttl:g} s, wait_replicas {wait_replicas}: master killed "
              f"-> next job started in {statistics.median(times):.2f} s median "
              f"({', '.join(f'{t:.2f}' for t in times)})", flush=True)


if __name__ == "__main__":
    main()
