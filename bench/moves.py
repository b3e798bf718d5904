"""Many hosts as one pool, timed: a join to a converged split, a stop request to the
job's processes being gone, a SIGKILL to the jobs running elsewhere.

    python bench/moves.py [--rounds 5] [--kills 20] [--lease-ttl 2] [--store redis|sqlite]

Each figure is the median and the worst of `--rounds` runs (the SIGKILL failover: of
`--kills` runs, with its p90) against a private redis-server or one SQLite file per run,
with real supervisor processes (lease_ttl as given, stop_grace 1 s)."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from common import redis_server, supervisor

from supervisor import Client

LONG = {"long": {"path": "sleeper.py", "timeout": 0}}
STOPPABLE = {
    **LONG,
    "sleeps": {"path": "stubborn.py", "function": "sleeps", "timeout": 0},
    "stubborn": {"path": "stubborn.py", "function": "ignores_sigterm", "timeout": 0},
}


def wait(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("waited too long")
        time.sleep(0.02)


def split(client: Client, keys: list[str]) -> Counter[str]:
    records = [client.job(key) for key in keys]
    return Counter(r["supervisor"] for r in records if r["state"] == "running" and r["pid"])


STORE = {"kind": "redis"}


def store_url(redis_url: str, tmp: str) -> str:
    return redis_url if STORE["kind"] == "redis" else f"sqlite:///{tmp}/pool.db"


def join_round(redis_url: str, ttl: float, n: int) -> float:
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        url = store_url(redis_url, tmp)
        settings = {"capacity": 4, "lease_ttl": ttl, "stop_grace": 1}
        pool = f"join{n}"
        stack.enter_context(supervisor(Path(tmp), url, pool, handlers=LONG, name="a.toml",
                                       id="a", **settings))
        client = stack.enter_context(contextlib.closing(Client(url, pool=pool)))
        keys = [f"k{i}" for i in range(4)]
        for key in keys:
            client.dispatch(key, {"seconds": 600}, handler="long")
        wait(lambda: split(client, keys) == {"a": 4})
        start = time.monotonic()
        stack.enter_context(supervisor(Path(tmp), url, pool, handlers=LONG, name="b.toml",
                                       id="b", **settings))
        wait(lambda: split(client, keys) == {"a": 2, "b": 2})
        return time.monotonic() - start


def stop_round(redis_url: str, ttl: float, n: int, handler: str) -> float:
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        url = store_url(redis_url, tmp)
        pool = f"stop{n}{handler}"
        stack.enter_context(supervisor(Path(tmp), url, pool, handlers=STOPPABLE, lease_ttl=ttl,
                                       stop_grace=1))
        client = stack.enter_context(contextlib.closing(Client(url, pool=pool)))
        client.dispatch("k", {"seconds": 600}, handler=handler)
        wait(lambda: client.job("k")["pid"])
        time.sleep(0.3)  # let the handler settle into its wait
        start = time.monotonic()
        client.stop("k")  # returns once the job's processes are gone
        return time.monotonic() - start


def kill_round(redis_url: str, ttl: float, n: int) -> float:
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        url = store_url(redis_url, tmp)
        settings = {"capacity": 4, "lease_ttl": ttl}
        pool = f"kill{n}"
        first = stack.enter_context(supervisor(Path(tmp), url, pool, handlers=LONG,
                                               name="a.toml", id="a", **settings))
        stack.enter_context(supervisor(Path(tmp), url, pool, handlers=LONG, name="b.toml",
                                       id="b", **settings))
        client = stack.enter_context(contextlib.closing(Client(url, pool=pool)))
        keys = [f"k{i}" for i in range(4)]
        for key in keys:
            client.dispatch(key, {"seconds": 600}, handler="long")
        wait(lambda: split(client, keys) == {"a": 2, "b": 2})
        start = time.monotonic()
        first.process.kill()
        wait(lambda: split(client, keys) == {"b": 4})
        return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kills", type=int, default=0, help="SIGKILL rounds (default: rounds)")
    parser.add_argument("--lease-ttl", type=float, default=2.0)
    parser.add_argument("--store", choices=["redis", "sqlite"], default="redis")
    args = parser.parse_args()
    STORE["kind"] = args.store
    with redis_server() as url:
        figures = {
            "join to a 2 + 2 split": [join_round(url, args.lease_ttl, n)
                                      for n in range(args.rounds)],
            "stop, stop-aware handler": [stop_round(url, args.lease_ttl, n, "long")
                                         for n in range(args.rounds)],
            "stop, handler ignores stops (SIGTERM)": [
                stop_round(url, args.lease_ttl, n, "sleeps") for n in range(args.rounds)],
            "stop, handler ignores SIGTERM (stop_grace 1 s)": [
                stop_round(url, args.lease_ttl, n, "stubborn") for n in range(args.rounds)],
            "SIGKILL to its jobs running elsewhere": [
                kill_round(url, args.lease_ttl, n) for n in range(args.kills or args.rounds)],
        }
    print(f"store {args.store}, lease_ttl {args.lease_ttl:g} s, {args.rounds} rounds each "
          f"({args.kills or args.rounds} SIGKILLs): median / worst")
    for what, seconds in figures.items():
        print(f"  {what:<48} {statistics.median(seconds):6.2f} s / {max(seconds):6.2f} s")
    kills = sorted(figures["SIGKILL to its jobs running elsewhere"])
    p90 = kills[min(len(kills) - 1, int(0.9 * len(kills)))]
    print(f"  SIGKILL failover distribution (s): min {kills[0]:.2f}, "
          f"p50 {statistics.median(kills):.2f}, p90 {p90:.2f}, max {kills[-1]:.2f}; "
          f"all: {' '.join(f'{k:.2f}' for k in kills)}")


if __name__ == "__main__":
    main()
