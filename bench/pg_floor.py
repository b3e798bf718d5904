"""What the smallest statements cost a PostgreSQL server on this machine: the floor under
a job's cost on the PostgreSQL store (docs/stores.md, "What a job costs the server").

    python bench/pg_floor.py [--calls 2000] [--listeners 16] [--pg-defaults | --pg-fast]

A private server (tests/helpers/postgres_server.py), as scale_out.py's: by default with
fsync, synchronous_commit and full_page_writes at PostgreSQL's defaults (on), as users run
it, so that each commit writes and flushes its WAL; `--pg-fast` turns them off, as the
tests' servers do.  One connection in autocommit, `--calls` of each statement; per call,
the server's CPU (the postmaster and every backend, psutil), the WAL it wrote
(pg_current_wal_lsn before and after) and the wall time (the client's, a commit's flush
included).  Then the CPU that `--listeners` idle connections, each listening on a channel
of its own, spend per NOTIFY on a channel none of them listens to (PostgreSQL signals
every listening backend of the database).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import time
from collections.abc import Callable

import psutil
import psycopg
from common import add_postgres_options, postgres_mode

from tests.helpers.postgres_server import PostgresServer


def server_cpu(postmaster: psutil.Process) -> float:
    times = postmaster.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in postmaster.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            child_times = child.cpu_times()
            total += child_times.user + child_times.system
    return total


def wal(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """The server's WAL position, in bytes from its start."""
    row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()
    assert row is not None
    return int(str(row[0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--listeners", type=int, default=16)
    add_postgres_options(parser)
    args = parser.parse_args()
    server = PostgresServer(durable=args.pg_durable).start()
    try:
        postmaster = psutil.Process(int((server.data / "postmaster.pid").read_text().split()[0]))
        conn = psycopg.connect(server.url, autocommit=True)
        conn.execute("CREATE TABLE t (pool text, key text, state text, payload bytea, "
                     "due float8, PRIMARY KEY (pool, key))")
        conn.execute("CREATE INDEX t_queue ON t (pool, due) WHERE state = 'pending'")
        conn.execute("CREATE INDEX t_state ON t (pool, state)")
        inserted, updated = itertools.count(), itertools.count()

        def transaction() -> None:
            with conn.transaction():
                conn.execute("SELECT 1")
                conn.execute("SELECT 1")

        statements: list[tuple[str, Callable[[], object]]] = [
            ("SELECT 1", lambda: conn.execute("SELECT 1")),
            ("INSERT of one row", lambda: conn.execute(
                "INSERT INTO t VALUES ('p', %s, 'pending', 'x', 1)", [str(next(inserted))])),
            ("UPDATE of one row's state", lambda: conn.execute(
                "UPDATE t SET state = 'running' WHERE pool = 'p' AND key = %s",
                [str(next(updated))])),
            ("BEGIN; SELECT 1; SELECT 1; COMMIT", transaction),
            ("SELECT pg_notify", lambda: conn.execute("SELECT pg_notify('nobody', 'w')")),
        ]
        print(f"{postgres_mode(args.pg_durable)}; per call, {args.calls} calls each "
              "(autocommit):")
        print(f"  {'':36s} {'server CPU':>10} {'WAL bytes':>10} {'wall':>10}")
        for name, call in statements:
            wal_before, cpu_before = wal(conn), server_cpu(postmaster)
            began = time.monotonic()
            for _ in range(args.calls):
                call()
            wall = (time.monotonic() - began) / args.calls
            cpu = (server_cpu(postmaster) - cpu_before) / args.calls
            written = (wal(conn) - wal_before) / args.calls
            print(f"  {name:36s} {1000 * cpu:7.3f} ms {written:10.0f} {1000 * wall:7.3f} ms")

        listeners = []
        for index in range(args.listeners):
            listener = psycopg.connect(server.url, autocommit=True)
            listener.execute(f'LISTEN "channel_{index}"')
            row = listener.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            listeners.append((listener, psutil.Process(row[0])))

        def listeners_cpu() -> float:
            return sum(sum(process.cpu_times()[:2]) for _, process in listeners)

        before = listeners_cpu()
        for _ in range(args.calls):
            conn.execute("NOTIFY elsewhere, 'x'")
        time.sleep(0.5)
        spent = (listeners_cpu() - before) / args.calls
        print(f"{args.listeners} listeners on other channels: {1e6 * spent:.0f} us of their "
              "CPU per NOTIFY")
        for listener, _ in listeners:
            listener.close()
        conn.close()
    finally:
        server.stop()
        server.remove()


if __name__ == "__main__":
    main()
