"""Store calls per refresh of the dashboard (`poolsup web`), with many records in the pool.

Dispatches --jobs pending jobs (dispatch_many), fails --failed of them and holds --running
claimed, then requests each dashboard part in-process (httpx over ASGI, no network) and
counts, per request: the client's round trips to the store (Redis: packets sent; SQLite:
transactions) and, on Redis, the commands Redis ran (INFO commandstats, Lua's inner calls
included) by name.  No supervisor runs, so nothing else touches the store.

    python bench/dashboard_calls.py [--jobs 100000] [--failed 1000] [--running 5] \
        [--store redis|sqlite]
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import redis
import redis.asyncio.connection
from common import redis_server

from supervisor.client import AsyncClient
from supervisor.store.sqlite import db as sqlite_db
from supervisor.web.app import DashboardSettings, create_app
from supervisor.web.views import job_path

HANDLER = "bulk"


class Counter:
    """Counts calls of a method while installed."""

    def __init__(self, owner: type, name: str) -> None:
        self.calls = 0
        self._owner, self._name = owner, name
        self._original: Callable[..., Any] = getattr(owner, name)

    def __enter__(self) -> Counter:
        original = self._original

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return original(*args, **kwargs)

        setattr(self._owner, self._name, counted)
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(self._owner, self._name, self._original)


def longest_zscan_usec(url: str | None) -> float:
    if url is None:
        return 0.0
    with redis.Redis.from_url(url) as connection:
        stats = connection.info("commandstats").get("cmdstat_zscan", {})
    return float(stats.get("usec_per_call", 0.0))


def command_stats(url: str | None) -> collections.Counter[str]:
    if url is None:
        return collections.Counter()
    with redis.Redis.from_url(url) as connection:
        stats = connection.info("commandstats")
    return collections.Counter({name.removeprefix("cmdstat_"): value["calls"]
                                for name, value in stats.items()})


async def fill(client: AsyncClient, jobs: int, failed: int, running: int) -> None:
    items = [{"key": f"job-{n:06d}", "handler": HANDLER} for n in range(jobs)]
    started = time.monotonic()
    await client.dispatch_many(items)
    print(f"dispatched {jobs} jobs in {time.monotonic() - started:.1f} s")
    store = await client._opened()
    batch = await store.claim("bench-sup", [HANDLER], failed + running, 3600.0, 3)
    for claimed in batch.jobs[:failed]:
        await store.fail(claimed.lease, "ValueError: disk full", final=True, retry_delay=0.0)
    print(f"failed {failed}, holding {len(batch.jobs) - failed} running")


async def measure(url: str, redis_url: str | None, jobs: int, failed: int, running: int
                  ) -> None:
    client = AsyncClient(url, pool="bench")
    await fill(client, jobs, failed, running)
    app = create_app(client, DashboardSettings(pool="bench", handlers=[HANDLER]))
    a_failed = (await client.jobs_page("failed", limit=1))[0]["key"]
    paths = {
        "overview part (/parts/overview)": "/parts/overview",
        "job part (/parts/jobs/KEY, a failed job)": "/parts" + job_path(a_failed),
        "jobs list, first page, pending": "/jobs?state=pending",
        "jobs list, prefix job-0999, pending": "/jobs?state=pending&prefix=job-0999",
        "jobs list, first page, failed": "/jobs?state=failed",
        "jobs list, any state, prefix job-05": "/jobs?prefix=job-05",
    }
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        await http.get("/parts/overview")  # opens the store connection
        for label, path in paths.items():
            before = command_stats(redis_url)
            with Counter(redis.asyncio.connection.AbstractConnection,
                         "send_packed_command") as sent, \
                    Counter(sqlite_db.SqliteDatabase, "read") as reads, \
                    Counter(sqlite_db.SqliteDatabase, "write") as writes:
                started = time.monotonic()
                answer = await http.get(path)
                took = time.monotonic() - started
            assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
            used = command_stats(redis_url) - before
            used.subtract({"info": 1, "hello": 1})  # the counting connection's own
            used = +used
            trips = sent.calls if redis_url else reads.calls + writes.calls
            detail = ", ".join(f"{name} {count}" for name, count in sorted(used.items()))
            print(f"{label}: {trips} round trips, {sum(used.values())} commands, "
                  f"{took * 1000:.0f} ms{f' ({detail})' if detail else ''}")
    if redis_url:
        print(f"Redis time per ZSCAN call (mean): {longest_zscan_usec(redis_url):.0f} us")
    await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--failed", type=int, default=1000)
    parser.add_argument("--running", type=int, default=5)
    parser.add_argument("--store", choices=["redis", "sqlite"], default="redis")
    args = parser.parse_args()
    if args.store == "redis":
        with redis_server() as url:
            anyio.run(measure, url, url, args.jobs, args.failed, args.running)
    else:
        with tempfile.TemporaryDirectory() as directory:
            anyio.run(measure, f"sqlite:///{directory}/pool.db", None, args.jobs, args.failed,
                      args.running)


if __name__ == "__main__":
    main()
