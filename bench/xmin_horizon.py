"""What a transaction that holds the database's xmin horizon open costs a PostgreSQL pool:
the throughput of one supervisor with nothing else on the server (phase A), and while
another session sits idle in a REPEATABLE READ transaction (phase B), so that no dead row
of poolsup.jobs can be vacuumed.  Target: B at least 70% of A (issue 42).

    python bench/xmin_horizon.py [--seconds 30] [--phases A,B,C] [--capacity 4]
                                 [--max-jobs-per-child 100] [--chunk 100]
                                 [--producer chunks|one-by-one] [--interval 5]
                                 [--explain] [--statements N] [--check]
                                 [--pg-defaults | --pg-fast]

A private PostgreSQL server (tests/helpers/postgres_server.py), by default at PostgreSQL's
defaults (fsync, synchronous_commit, full_page_writes on; autovacuum on, at its default
settings), and one poolsup supervisor (capacity `--capacity`, the no-op handler of
handlers/noop.py, its children reused for `--max-jobs-per-child` jobs, as
bench/peers.py's "poolsup-reused", so that the rate is bound by the store and the
supervisor, not by forks).  The producer keeps a backlog of `--chunk` to 2 x `--chunk`
pending jobs: whenever fewer than `--chunk` are pending (its own count, polled every
50 ms), it adds `--chunk` more, in one `Client.dispatch_many` call (`--producer chunks`,
the default) or one `Client.dispatch` each (`--producer one-by-one`).  So the pool never
runs dry, and the pending part of the queue stays short in every phase.

Each phase starts from a vacuumed table (`VACUUM poolsup.jobs`, then one chunk through the
pool as a warm-up, drained), runs the producer for `--seconds`, stops it and lets the pool
drain.  Its throughput is the jobs that succeeded while the producer ran (the pool's
succeeded count at its start and end) over `--seconds`; it is also printed per
`--interval` seconds (default 5), which shows whether it falls as the dead rows pile up.

- A: nothing else on the server.
- B: the same pool, while a second connection holds the horizon: `BEGIN ISOLATION LEVEL
  REPEATABLE READ; SELECT 1 FROM poolsup.jobs LIMIT 1;`, opened before the phase's
  warm-up and then left idle in transaction until the phase has drained (its snapshot's
  xmin is the horizon: every row version that a transaction deletes or updates after it,
  each job's pending -> running -> succeeded included, stays, for autovacuum as for
  VACUUM, and stays in every index it was entered in).
- C: as B, on a fresh pool (a new pool name and a new supervisor), so that the phase does
  not also measure A's and B's records left in the pool.  The table is shared (the pool
  is a column), so the dead rows of A and B are still in its heap; pool-scoped index
  scans do not visit them.

Per phase, at its end (before the holder's transaction ends): the jobs, the throughput,
the dead tuples of poolsup.jobs (pg_stat_user_tables n_dead_tup, read after a second for
the backends' statistics to be flushed) and its autovacuum runs during the phase, the
sizes of the table and of its indexes (pg_relation_size, pg_indexes_size; the pending
queue's partial index jobs_queue_by_priority on its own), and the server's CPU per job
(the postmaster and every backend, psutil, as bench/pg_floor.py; the backends that exited
through the postmaster's children times).  That CPU includes the producer's dispatches,
its polls of the pending count (about 20 a second; under a held horizon they too walk the
dead entries) and the held transaction (idle), not only the supervisor's statements.

With `--explain`, three scans that every claim makes are run under EXPLAIN (ANALYZE,
BUFFERS) on the drained pool, the holder still open, in a transaction rolled back: the due
jobs of one handler (sql/functions.sql due_keys), the expired leases (queries.sql
expired_leases) and the next due time (after_claim); their buffers are the index entries
and heap pages they walk through to find nothing.  With `--statements N`, the server
loads pg_stat_statements (track = all: the statements inside poolsup's functions too) and
each phase prints the N that took the most execution time during the producer's run,
with their calls, mean time and buffers per call.

The ratio B/A (and C/A) is printed with the target; `--check` exits 1 if one is missed.
The figures of a shared, busy machine move by 20% and more between runs: compare phases
within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg
from common import add_postgres_options, postgres_mode, supervisor
from pg_floor import server_cpu

from supervisor import Client
from tests.helpers.postgres_server import PostgresServer

TARGET = 0.70  # a held horizon costs the pool at most 30% of its throughput
HOLD = "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1 FROM poolsup.jobs LIMIT 1;"
POLL = 0.05  # s between the producer's counts of pending jobs

# Three of a claim's scans, for EXPLAIN: the pending queue as sql/functions.sql due_keys
# and after_claim read it, and the running jobs' leases (queries.sql expired_leases); the
# time as a value, as the claim passes it (poolsup.now() is volatile: no index bound).
DUE_SCAN = """
SELECT key, handler, job_group, priority, due, seq FROM poolsup.jobs
WHERE pool = %(pool)s AND state = 'pending' AND handler = 'noop' AND due <= %(now)s
ORDER BY priority DESC, due, seq LIMIT %(count)s FOR UPDATE SKIP LOCKED"""
EXPIRED_LEASES = """
SELECT key, handler, supervisor, lease_deadline, lease_losses, stop_requested
FROM poolsup.jobs
WHERE pool = %(pool)s AND state = 'running' AND lease_deadline < %(now)s
ORDER BY lease_deadline LIMIT 100 FOR UPDATE SKIP LOCKED"""
NEXT_DUE = """
SELECT min(due) FROM poolsup.jobs
WHERE pool = %(pool)s AND state = 'pending' AND due > %(now)s
    AND handler = ANY(ARRAY['noop'])"""


@dataclass(frozen=True)
class Table:
    """poolsup.jobs as pg_stat_user_tables and pg_relation_size see it."""

    dead: int
    live: int
    autovacuums: int
    heap_bytes: int
    index_bytes: int
    queue_index_bytes: int  # jobs_queue_by_priority, the pending jobs' partial index


@dataclass(frozen=True)
class Phase:
    name: str
    pool: str
    held: bool
    jobs: int
    seconds: float
    cpu: float  # the server's CPU seconds during the producer's run
    table: Table
    autovacuums: int  # during the phase
    horizon_age: int | None  # age(backend_xmin) of the holder at the end, transactions
    explain: str
    statements: str  # the top statements by execution time in the producer's run
    windows: list[float]  # jobs/s in each `--interval` of the producer's run

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


class Database:
    """The bench's own connection: counts, statistics, sizes, VACUUM and EXPLAIN."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)

    def count(self, pool: str, state: str) -> int:
        row = self.conn.execute("SELECT count(*) FROM poolsup.jobs WHERE pool = %s "
                                "AND state = %s", [pool, state]).fetchone()
        return int(row[0]) if row else 0

    def table(self) -> Table:
        self.conn.execute("SELECT pg_stat_clear_snapshot()")
        row = self.conn.execute(
            "SELECT n_dead_tup, n_live_tup, autovacuum_count, "
            "pg_relation_size('poolsup.jobs'), pg_indexes_size('poolsup.jobs'), "
            "pg_relation_size('poolsup.jobs_queue_by_priority') "
            "FROM pg_stat_user_tables WHERE relid = 'poolsup.jobs'::regclass").fetchone()
        assert row is not None
        return Table(*(int(value) for value in row))

    def vacuum(self) -> None:
        self.conn.execute("VACUUM poolsup.jobs")

    def horizon_age(self, pid: int) -> int | None:
        row = self.conn.execute("SELECT age(backend_xmin) FROM pg_stat_activity "
                                "WHERE pid = %s", [pid]).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def explain(self, pool: str, count: int) -> str:
        lines: list[str] = []
        with contextlib.suppress(psycopg.errors.QueryCanceled), self.conn.transaction(
                force_rollback=True):
            self.conn.execute("SET LOCAL statement_timeout = '30s'")
            row = self.conn.execute("SELECT poolsup.now()").fetchone()
            assert row is not None
            values = {"pool": pool, "count": count, "now": row[0]}
            for title, statement in (("due_keys' scan of the queue", DUE_SCAN),
                                     ("expired_leases", EXPIRED_LEASES),
                                     ("after_claim's next due time", NEXT_DUE)):
                lines.append(f"  -- {title}")
                plan = self.conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statement,
                                         values).fetchall()
                lines += [f"  {row[0]}" for row in plan]
        return "\n".join(lines)

    def reset_statements(self) -> None:
        self.conn.execute("SELECT pg_stat_statements_reset()")

    def statements(self, top: int) -> str:
        """The `top` statements by execution time since the last reset: calls, mean ms and
        shared buffers per call, the statement's first 90 characters."""
        rows = self.conn.execute(
            "SELECT calls, total_exec_time, mean_exec_time, "
            "(shared_blks_hit + shared_blks_read)::float8 / greatest(calls, 1), "
            "regexp_replace(query, '\\s+', ' ', 'g') FROM pg_stat_statements "
            "WHERE query NOT LIKE '%%pg_stat_statements%%' "
            "ORDER BY total_exec_time DESC LIMIT %s", [top]).fetchall()
        lines = [f"  {'calls':>7} {'total ms':>9} {'mean ms':>8} {'buffers':>8}  statement"]
        lines += [f"  {calls:7d} {total:9.0f} {mean:8.3f} {buffers:8.1f}  {query[:90]}"
                  for calls, total, mean, buffers, query in rows]
        return "\n".join(lines)

    def close(self) -> None:
        self.conn.close()


@contextlib.contextmanager
def horizon_held(url: str) -> Iterator[int]:
    """A session idle in a REPEATABLE READ transaction that has read poolsup.jobs: its
    snapshot holds the database's xmin horizon until the block ends.  Its backend's pid."""
    with psycopg.connect(url, autocommit=True) as holder:  # it sends BEGIN itself
        row = holder.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        for statement in HOLD.split(";")[:2]:
            holder.execute(statement)
        try:
            yield int(row[0])
        finally:
            holder.execute("ROLLBACK")


def produce(client: Client, db: Database, pool: str, args: argparse.Namespace,
            prefix: str) -> list[tuple[float, int]]:
    """Keep `--chunk` to 2 x `--chunk` jobs pending for `--seconds`; (time, the pool's
    succeeded count) at its start, every `--interval` seconds and at its end."""
    dispatched = 0
    began = time.monotonic()
    counts = [(began, db.count(pool, "succeeded"))]
    while (now := time.monotonic()) < began + args.seconds:
        if now >= began + len(counts) * args.interval:
            counts.append((now, db.count(pool, "succeeded")))
        if db.count(pool, "pending") >= args.chunk:
            time.sleep(POLL)
            continue
        add_chunk(client, [f"{prefix}-{dispatched + n}" for n in range(args.chunk)], args)
        dispatched += args.chunk
    return [*counts, (time.monotonic(), db.count(pool, "succeeded"))]


def add_chunk(client: Client, keys: list[str], args: argparse.Namespace) -> None:
    if args.producer == "chunks":
        client.dispatch_many([{"key": key, "handler": "noop"} for key in keys])
    else:
        for key in keys:
            client.dispatch(key, None, handler="noop")


def drain(db: Database, pool: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while db.count(pool, "pending") + db.count(pool, "running"):
        if time.monotonic() > deadline:
            raise SystemExit(f"pool {pool} not drained after {timeout:.0f} s")
        time.sleep(0.1)


def run_phase(name: str, held: bool, client: Client, db: Database, pool: str,
              postmaster: psutil.Process, url: str, args: argparse.Namespace) -> Phase:
    db.vacuum()
    with contextlib.ExitStack() as stack:
        holder = stack.enter_context(horizon_held(url)) if held else None
        before_table = db.table()
        add_chunk(client, [f"{name}-warm-{n}" for n in range(args.chunk)], args)
        drain(db, pool)
        if args.statements:
            db.reset_statements()
        cpu = server_cpu(postmaster)
        counts = produce(client, db, pool, args, name)
        cpu = server_cpu(postmaster) - cpu
        statements = db.statements(args.statements) if args.statements else ""
        drain(db, pool)
        time.sleep(1.0)  # the backends flush their statistics at most once a second
        table = db.table()
        age = None if holder is None else db.horizon_age(holder)
        explain = db.explain(pool, args.capacity) if args.explain else ""
    (began, first), (ended, last) = counts[0], counts[-1]
    return Phase(name, pool, held, last - first, ended - began, cpu, table,
                 table.autovacuums - before_table.autovacuums, age, explain, statements,
                 [(after - before) / (then - at) for (at, before), (then, after)
                  in itertools.pairwise(counts)])


@contextlib.contextmanager
def pool_supervisor(url: str, pool: str, directory: Path,
                    args: argparse.Namespace) -> Iterator[Client]:
    handlers = {"noop": {"path": "noop.py", "timeout": 0,
                         "max_jobs_per_child": args.max_jobs_per_child}}
    with supervisor(directory, url, pool, handlers=handlers, name=f"{pool}.toml",
                    id=f"s-{pool}", capacity=args.capacity), \
            contextlib.closing(Client(url, pool=pool)) as client:
        yield client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="the producer's run in each phase (default 30)")
    parser.add_argument("--phases", default="A,B",
                        help="A (nothing else), B (horizon held), C (horizon held, fresh "
                             "pool); comma-separated, in this order (default A,B)")
    parser.add_argument("--capacity", type=int, default=4)
    parser.add_argument("--max-jobs-per-child", type=int, default=100)
    parser.add_argument("--interval", type=float, default=5.0,
                        help="the throughput is also printed per this many seconds "
                             "(default 5)")
    parser.add_argument("--chunk", type=int, default=100,
                        help="jobs per addition to the backlog (default 100)")
    parser.add_argument("--producer", choices=("chunks", "one-by-one"), default="chunks")
    parser.add_argument("--explain", action="store_true",
                        help="EXPLAIN (ANALYZE, BUFFERS) the claim's queue scans per phase")
    parser.add_argument("--statements", type=int, default=0, metavar="N",
                        help="print the N statements that took the most time in each "
                             "phase (pg_stat_statements, nested ones included)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a phase with the horizon held is under the target")
    add_postgres_options(parser)
    args = parser.parse_args()
    phases = args.phases.split(",")
    if not phases or not set(phases) <= {"A", "B", "C"} or phases != sorted(set(phases)):
        parser.error(f"--phases: some of A,B,C in this order (got {args.phases!r})")

    directory = Path(tempfile.mkdtemp(prefix="poolsup-xmin-"))
    server = PostgresServer(durable=args.pg_durable, settings={
        "shared_preload_libraries": "pg_stat_statements",
        "pg_stat_statements.track": "all"} if args.statements else None).start()
    results: list[Phase] = []
    try:
        postmaster = psutil.Process(int((server.data / "postmaster.pid").read_text().split()[0]))
        first = f"xmin-{uuid.uuid4().hex[:8]}"
        with contextlib.closing(Database(server.url)) as db:
            if args.statements:
                db.conn.execute("CREATE EXTENSION pg_stat_statements")
            if {"A", "B"} & set(phases):
                with pool_supervisor(server.url, first, directory, args) as client:
                    for name in ("A", "B"):
                        if name in phases:
                            results.append(run_phase(name, name == "B", client, db, first,
                                                     postmaster, server.url, args))
                            report(results[-1], args)
            if "C" in phases:
                fresh = f"xmin-{uuid.uuid4().hex[:8]}"
                with pool_supervisor(server.url, fresh, directory, args) as client:
                    results.append(run_phase("C", True, client, db, fresh, postmaster,
                                             server.url, args))
                    report(results[-1], args)
    finally:
        server.remove()
    sys.exit(summary(results, args))


def report(phase: Phase, args: argparse.Namespace) -> None:
    what = {"A": "nothing else on the server",
            "B": "horizon held (idle in a REPEATABLE READ transaction)",
            "C": "horizon held, fresh pool"}[phase.name]
    table = phase.table
    print(f"phase {phase.name} ({what}), pool {phase.pool}:", flush=True)
    print(f"  {phase.jobs} jobs in {phase.seconds:.1f} s: {phase.rate:.0f} jobs/s; "
          f"server CPU {1000 * phase.cpu / max(phase.jobs, 1):.3f} ms per job")
    print(f"  poolsup.jobs: {table.dead} dead / {table.live} live tuples, "
          f"{phase.autovacuums} autovacuum run(s) in the phase; table "
          f"{table.heap_bytes / 2**20:.1f} MiB, indexes {table.index_bytes / 2**20:.1f} MiB "
          f"(jobs_queue_by_priority {table.queue_index_bytes / 2**10:.0f} KiB)")
    print(f"  jobs/s per {args.interval:g} s: "
          + " ".join(f"{rate:.0f}" for rate in phase.windows))
    if phase.horizon_age is not None:
        print(f"  the holder's xmin at the end: {phase.horizon_age} transactions old")
    if phase.statements:
        print(phase.statements)
    if phase.explain:
        print(phase.explain)


def summary(results: list[Phase], args: argparse.Namespace) -> int:
    """Print the ratios to phase A; the exit status (1: `--check` and a target missed)."""
    print(f"PostgreSQL: {postgres_mode(args.pg_durable)}; capacity {args.capacity}, "
          f"max_jobs_per_child {args.max_jobs_per_child}, producer {args.producer} of "
          f"{args.chunk}, {args.seconds:g} s per phase")
    baseline = next((phase for phase in results if phase.name == "A"), None)
    missed = False
    for phase in results:
        if phase.held and baseline is not None and baseline.rate > 0:
            ratio = phase.rate / baseline.rate
            met = ratio >= TARGET
            missed |= not met
            print(f"  {phase.name}/A throughput {ratio:.2f} (target at least "
                  f"{TARGET:.2f}): {'met' if met else 'MISSED'}")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    main()
