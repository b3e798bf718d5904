"""Lease renewal with every core saturated by handlers: lost leases and renewal lag.

    python bench/renewal.py [--seconds 30] [--lease-ttl 2] [--busy-per-core 2]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import tempfile
import time
import uuid
from pathlib import Path

from common import redis_server, supervisor

from supervisor import Client


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--lease-ttl", type=float, default=2.0)
    parser.add_argument("--busy-per-core", type=int, default=2)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="poolsup-renewal-"))
    pool = f"bench-{uuid.uuid4().hex[:8]}"
    busy = (os.cpu_count() or 1) * args.busy_per_core
    ledger = directory / "ledger.txt"
    handlers = {"ledger": {"path": str(Path(__file__).resolve().parent.parent / "tests" /
                                       "handlers" / "ledger.py"), "timeout": 0}}
    with redis_server() as store, supervisor(directory, store, pool, handlers=handlers,
                                             capacity=busy, lease_ttl=args.lease_ttl) as sup:
        client = Client(store, pool=pool)
        for index in range(busy):
            client.dispatch(f"busy-{index}",
                            {"ledger": str(ledger), "seconds": args.seconds, "busy": True},
                            handler="ledger")
        time.sleep(args.seconds + 2)
        records = client.jobs()
        client.close()
        os.kill(sup.pid, signal.SIGTERM)
        sup.wait(60)
        log = sup.log()
    report = re.findall(r"renewals: .*", log)
    succeeded = sum(1 for r in records if r["state"] == "succeeded" and r["attempts"] == 1)
    print(f"busy children={busy} on {os.cpu_count()} cores, lease_ttl={args.lease_ttl} s, "
          f"{args.seconds:.0f} s: {succeeded}/{busy} jobs succeeded on their first attempt")
    print(report[-1] if report else "no renewal report in the supervisor log")


if __name__ == "__main__":
    main()
