"""What keeping a job's output for `poolsup logs` costs the supervisor: a job prints N
short lines under a real supervisor, once with `max_log` = 1MiB and once with 0 (capture
off); the supervisor's CPU time per line (psutil, before and after the job) and what the
store holds of the output.

    python bench/output_cost.py [--lines 200000] [--store redis|sqlite|both]
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import redis
from common import redis_server, supervisor

from supervisor import Client
from supervisor.store.redis.keys import PoolKeys

KEY = "printer"


def stored_bytes(store: str, pool: str) -> tuple[int, int]:
    """(bytes of output kept, bytes the store uses for them: Redis MEMORY USAGE of the
    run's string and the job's output hash; SQLite the chunks' lengths)."""
    if store.startswith("redis"):
        keys = PoolKeys(pool)
        with redis.Redis.from_url(store) as raw:
            names = list(raw.scan_iter(match=f"{keys.prefix}output*"))
            kept = sum(int(raw.strlen(n)) for n in names if b"output-run:" in n)
            used = sum(int(raw.memory_usage(n) or 0) for n in names)
            return kept, used
    with sqlite3.connect(store.removeprefix("sqlite://")) as conn:
        kept = int(conn.execute("SELECT coalesce(sum(length(data)), 0) FROM output_chunks")
                   .fetchone()[0])
    return kept, kept


def measure(store: str, max_log: int, lines: int) -> dict[str, float]:
    directory = Path(tempfile.mkdtemp(prefix="poolsup-output-cost-"))
    if store == "sqlite":
        store = f"sqlite:///{directory}/pool.db"
    pool = f"bench-{uuid.uuid4().hex[:8]}"
    handlers = {"printer": {"path": "printer.py"}}
    with supervisor(directory, store, pool, handlers=handlers, capacity=1,
                    pool_options={"max_log": max_log}) as sup:
        process = psutil.Process(sup.pid)
        client = Client(store, pool=pool)
        time.sleep(1.0)  # past the start-up
        before = process.cpu_times()
        started = time.monotonic()
        client.dispatch(KEY, {"lines": lines}, handler="printer")
        record = client.wait(KEY, timeout=300)
        elapsed = time.monotonic() - started
        after = process.cpu_times()
        kept, used = stored_bytes(store, pool)
        printed = sum(a.dropped_bytes + len(a.text) for a in client.logs(KEY))
        client.close()
    assert record["state"] == "succeeded", record
    cpu = (after.user - before.user) + (after.system - before.system)
    return {"cpu": cpu, "per_line_us": cpu / lines * 1e6, "elapsed": elapsed,
            "kept": kept, "used": used, "printed": printed}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--store", choices=["redis", "sqlite", "both"], default="both")
    args = parser.parse_args()
    kinds = ["redis", "sqlite"] if args.store == "both" else [args.store]
    with redis_server() as redis_url:
        for kind in kinds:
            store = redis_url if kind == "redis" else "sqlite"
            off = measure(store, 0, args.lines)
            on = measure(store, 1024 * 1024, args.lines)
            print(f"{kind}: {args.lines} lines; supervisor CPU {off['cpu']:.3f} s with "
                  f"max_log = 0 ({off['per_line_us']:.2f} us/line), {on['cpu']:.3f} s with "
                  f"max_log = 1MiB ({on['per_line_us']:.2f} us/line): "
                  f"+{on['per_line_us'] - off['per_line_us']:.2f} us/line; job "
                  f"{off['elapsed']:.2f} s / {on['elapsed']:.2f} s; store keeps "
                  f"{on['kept']} of {on['printed']} bytes printed "
                  f"(memory/bytes used {on['used']}), {off['kept']} with max_log = 0")


if __name__ == "__main__":
    main()
