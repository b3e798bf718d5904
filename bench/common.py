"""Shared pieces of the benchmarks: a private redis-server and supervisors, and the
options of a private PostgreSQL server."""

from __future__ import annotations

import argparse
import compileall
import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from supervisor.core.stats import percentile  # noqa: E402, F401 - shared with the benches
from tests.helpers.pool import SupervisorProcess, write_pool  # noqa: E402

HANDLERS = Path(__file__).resolve().parent / "handlers"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="poolsup-bench-")
    process = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--bind",
            "127.0.0.1",
            "--dir",
            workdir,
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(10)


@functools.cache
def compiled() -> None:
    """poolsup's packages and the bench's handlers byte-compiled, as `pip install` leaves
    them: run from a checkout with PYTHONDONTWRITEBYTECODE=1 (set on these machines),
    each supervisor and fork server would compile every module at its start, some 80 ms
    of a supervisor's start CPU that an installed poolsup, Celery or RQ does not pay."""
    for folder in ("supervisor", "sandbox", "bench"):
        compileall.compile_dir(ROOT / folder, quiet=1)


@contextlib.contextmanager
def supervisor(
    directory: Path,
    store: str,
    pool: str,
    *,
    handlers: dict[str, dict[str, object]],
    name: str = "pool.toml",
    **settings: object,
) -> Iterator[SupervisorProcess]:
    compiled()
    handler_table = {
        key: {**value, "path": str(HANDLERS / str(value["path"]))}
        for key, value in handlers.items()
    }
    config = write_pool(
        directory, store=store, pool=pool, handlers=handler_table, name=name, **settings
    )
    process = SupervisorProcess(config, directory / f"{name}.log").start()
    try:
        process.wait_serving()
        yield process
    finally:
        if process.process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            process.wait(60)


def add_postgres_options(parser: argparse.ArgumentParser) -> None:
    """`--pg-defaults` (the default) and `--pg-fast`, as `args.pg_durable`: the private
    PostgreSQL server (tests/helpers/postgres_server.py) with fsync, synchronous_commit and
    full_page_writes at PostgreSQL's defaults, on, as users run it; or off, as the tests'
    servers, where no commit waits for its WAL to reach the disk."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--pg-defaults", dest="pg_durable", action="store_true", default=True,
                       help="PostgreSQL with fsync, synchronous_commit and full_page_writes "
                            "on, its defaults (the default)")
    group.add_argument("--pg-fast", dest="pg_durable", action="store_false",
                       help="PostgreSQL with fsync, synchronous_commit and full_page_writes "
                            "off, as the tests' servers")


def postgres_mode(durable: bool) -> str:
    """How the private PostgreSQL server was started, for a report's heading."""
    return ("fsync, synchronous_commit, full_page_writes on (PostgreSQL's defaults)" if durable
            else "fsync, synchronous_commit, full_page_writes off (--pg-fast)")
