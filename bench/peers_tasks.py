"""Job and task definitions for the peer benchmarks (bench/peers.py).

Importable by RQ workers and the Celery worker: run them with cwd=bench or bench on
PYTHONPATH. The module imports only the standard library at import time, so an RQ work
horse that imports it pays nothing for Celery; the Celery app is built on first access
to `peers_tasks.app` from the Redis URL in $PEERS_REDIS_URL (or by `celery_app(url)`).

    celery -A peers_tasks:app worker --pool=prefork --concurrency=N -Q QUEUE
    python -c 'import peers_tasks; peers_tasks.rq_worker_main()' URL QUEUE [--burst]
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

# Task names, shared by the dispatcher (peers.py) and the workers.
NOOP = "peers_tasks.noop"
STARTED = "peers_tasks.started"


def noop() -> None:
    """The no-op job of the throughput benchmarks (RQ)."""
    return None


def started() -> float:
    """Returns the wall-clock time at which the job started (latency benchmarks)."""
    return time.time()


def stamp() -> float:
    """The Celery throughput task: returns its start time; the result backend records
    `date_done` when the result is stored, which is the task's finish time."""
    return time.time()


_apps: dict[str, Any] = {}


def celery_app(url: str) -> Any:
    """The Celery app of the benchmarks: broker and result backend on the same Redis."""
    if url not in _apps:
        from celery import Celery

        app = Celery("peers_tasks", broker=url, backend=url)
        app.conf.update(
            broker_connection_retry_on_startup=True,
            worker_hijack_root_logger=False,
            task_serializer="json",
            result_serializer="json",
            accept_content=["json"],
        )
        app.task(name=NOOP)(noop)
        app.task(name=STARTED)(started)
        app.task(name="peers_tasks.stamp")(stamp)
        _apps[url] = app
    return _apps[url]


def __getattr__(name: str) -> Any:
    if name == "app":
        return celery_app(os.environ["PEERS_REDIS_URL"])
    raise AttributeError(name)


def rq_worker_main(argv: list[str] | None = None) -> None:
    """One RQ forking `Worker` (a work horse forked per job) with this module preloaded,
    as RQ's performance notes recommend: `URL QUEUE [--burst]`."""
    from redis import Redis
    from rq import Queue, Worker

    args = sys.argv[1:] if argv is None else argv
    url, queue = args[0], args[1]
    connection = Redis.from_url(url)
    worker = Worker([Queue(queue, connection=connection)], connection=connection,
                    log_job_description=False)
    worker.work(burst="--burst" in args, logging_level="WARNING")
