"""Task functions and worker entry points of arq and saq for bench/async_peers.py.

Run the workers with cwd=bench or bench on PYTHONPATH. The same two coroutine functions
serve both systems (arq calls `function(ctx, *args, **kwargs)`, saq
`function(ctx, **kwargs)`, and both register a function by its name):

    python -c 'import async_peers_tasks as t; t.arq_worker_main()' URL QUEUE MAX_JOBS [TIMEOUT]
    python -c 'import async_peers_tasks as t; t.saq_worker_main()' URL QUEUE CONCURRENCY

Each worker logs at WARNING (arq's own CLI would log every job at INFO). Their Redis
clients' connection pools are unbounded (`unbounded`), as redis-py 5's asyncio pools were
by default (2**31); redis-py 8 bounds them to 100 connections, and saq's concurrency tasks
each block a connection in BLMOVE, so a saq worker of concurrency 100 runs out (saq's
`redis` extra asks for redis < 8, arq 0.26+ for redis < 6; poolsup needs redis >= 8).
Every other setting is the library's default, but the hold phase's job timeouts (arq's
`job_timeout`, 300 s by default, from the command line; saq's per job, 10 s by default,
set by the dispatcher).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any
from urllib.parse import urlsplit, urlunsplit

# Function names, shared by the dispatcher (async_peers.py) and the workers.
NOOP = "noop"
SLEEPER = "sleeper"
UNBOUNDED = 2**31  # redis-py 5's default max_connections of an asyncio pool (8's: 100)


def unbounded(url: str) -> str:
    """`url` with `max_connections` set to UNBOUNDED (redis-py reads it from the query)."""
    parts = urlsplit(url)
    query = "&".join(filter(None, [parts.query, f"max_connections={UNBOUNDED}"]))
    return urlunsplit(parts._replace(query=query))


def arq_redis(url: str) -> Any:
    """An `ArqRedis` client on `url` with an unbounded pool (arq's `create_pool` takes no
    pool size)."""
    from arq.connections import ArqRedis

    return ArqRedis.from_url(unbounded(url))


async def noop(ctx: dict[str, Any]) -> None:
    """The no-op job of the throughput phase."""
    return None


async def sleeper(ctx: dict[str, Any], seconds: float) -> None:
    """Holds its job for `seconds` without using the CPU (the hold phase)."""
    await asyncio.sleep(seconds)


def arq_worker_main(argv: list[str] | None = None) -> None:
    """One arq `Worker`: `URL QUEUE MAX_JOBS [JOB_TIMEOUT]`."""
    from arq.worker import Worker

    args = sys.argv[1:] if argv is None else argv
    url, queue, max_jobs = args[0], args[1], int(args[2])
    job_timeout = float(args[3]) if len(args) > 3 else 300.0  # arq's default
    logging.basicConfig(level=logging.WARNING)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)  # arq's Worker takes the current loop
    worker = Worker(functions=[noop, sleeper], queue_name=queue,
                    redis_pool=loop.run_until_complete(_pinged(arq_redis(url))),
                    max_jobs=max_jobs, job_timeout=job_timeout)
    worker.run()


async def _pinged(client: Any) -> Any:
    await client.ping()
    return client


def saq_worker_main(argv: list[str] | None = None) -> None:
    """One saq `Worker` on a Redis queue: `URL QUEUE CONCURRENCY`."""
    from saq import Queue, Worker

    args = sys.argv[1:] if argv is None else argv
    url, queue_name, concurrency = args[0], args[1], int(args[2])
    logging.basicConfig(level=logging.WARNING)

    async def run() -> None:
        queue = Queue.from_url(unbounded(url), name=queue_name)
        worker: Worker[Any] = Worker(queue, functions=[noop, sleeper],
                                     concurrency=concurrency)
        await queue.connect()
        try:
            await worker.start()  # until SIGTERM or SIGINT
        finally:
            await queue.disconnect()

    asyncio.run(run())
