"""What a pool costs its store per job as it grows: the same no-op jobs through a pool of
1 and of 16 idle supervisors, each on a fresh private redis-server (or, with `--store
postgres`, a fresh PostgreSQL server: tests/helpers/postgres_server.py, with fsync,
synchronous_commit and full_page_writes at PostgreSQL's defaults, on, as users run it;
`--pg-fast` turns them off, as the tests' servers do, which hides what each commit costs).
Beside Redis, the same measurement of Celery's worker (below).

    python bench/scale_out.py [--store redis|postgres|redis,postgres] [--jobs 1000]
                              [--supervisors 1,16] [--capacity 4] [--idle-seconds 5]
                              [--celery-workers 1,16] [--pg-defaults | --pg-fast]

For each pool size: start the supervisors (capacity `--capacity`, the no-op handler of
handlers/noop.py, default settings otherwise; the job history is always kept), wait until
every one is registered and idle, and measure the idle pool for `--idle-seconds`:
redis-server's CPU (user + system, psutil), its read() calls (/proc/PID/io) and `INFO
commandstats`.  Then dispatch `--jobs` jobs one by one through `supervisor.Client` (the
dispatch rate is jobs / the dispatch's wall time), wait until all have succeeded, and
measure again.  The idle pool's rates times the active window's length are subtracted,
and what is left is divided by the jobs.  /proc gives CPU times in clock ticks of
10 ms, so a per-job CPU figure is within about 0.02 ms at 1,000 jobs, 0.2 ms at 100.

Then the same number of jobs is dispatched one by one with the handler paused: the
wake-ups and the claims they cause still happen, but no job runs, so the rate is the
store's and the pool's, not the producer's share of cores busy with the jobs it started.
The producer's own CPU per dispatch and how busy the host's cores were are printed too.

Commands are every command in `INFO commandstats`, which counts the commands run inside
scripts; the script calls themselves (eval, evalsha, fcall and their _ro forms) are not
among them but are counted on their own row; MULTI and EXEC count as commands (Celery
sends three such transactions per task).  Requests are redis-server's read() calls
(`syscr`): it reads a client's socket once when it becomes readable, so a request is
about one round trip (a pipeline's commands arrive in one).  This script's own commands
and requests are left out: INFO, CONFIG and the polls of the wait for the jobs to end.

Celery (with `--store redis`, for each count of `--celery-workers`, default the pool
sizes): that many Celery 5 workers (bench/peers.py's command: prefork pool, concurrency
`--capacity` each, gossip, mingle and heartbeat off) on a fresh redis-server of their
own, the no-op task of bench/peers_tasks.py sent one by one with `.delay()`, measured the
same way (idle, then the jobs; no paused run).  The result backend is on, on the same
Redis, as most Celery users run it and as poolsup keeps every job's outcome: the worker
stores each result (SETEX) and publishes it, and each `.delay()` subscribes to its
result's channel (Celery's Redis backend does so outside a worker, whether or not the
result is read).  The workers are ready when as many clients are blocked (in BRPOP);
the jobs have ended when every result key exists.  A ratio line compares poolsup's server
CPU and commands per job with Celery's (as many workers as supervisors where both ran).

On PostgreSQL the server's CPU is that of the postmaster and every backend (psutil; the
backends that exited meanwhile through the postmaster's children times); "commands" are
the statements clients sent (pg_stat_statements, top level: counted at once, where
pg_stat_database's transaction counts reach the shared view up to 10 s late), "script
calls" the transactions among them (each BEGIN; a statement run on its own, as LISTEN,
is its own transaction and not counted), and WAL bytes the difference of
pg_current_wal_lsn() (pg_wal_lsn_diff), the idle pool's subtracted like the rest.  This
script's own statements are left out (they write no WAL).

    python bench/scale_out.py --store redis,postgres   # both, in one run, side by side
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import peers_tasks
import psutil
import psycopg
import redis
from common import add_postgres_options, postgres_mode, redis_server, supervisor
from cpu_split import redis_process
from peers import celery_worker_command, workers

from supervisor import Client
from supervisor.store.redis.keys import PoolKeys
from tests.helpers.postgres_server import PostgresServer

HANDLERS = {"noop": {"path": "noop.py"}}
SCRIPT_CALLS = ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")
OWN = ("info", "config")  # this script's instruments


@dataclass(frozen=True)
class Reading:
    at: float
    cpu: float  # the server's user + system seconds
    calls: dict[str, int]  # command -> calls
    requests: int = 0  # redis-server's read() calls
    wal: int = 0  # PostgreSQL's WAL position, bytes
    own_commands: int = 0  # this script's commands and requests sent before the reading
    own_requests: int = 0


@dataclass(frozen=True)
class Cost:
    seconds: float
    cpu: float
    commands: float
    scripts: float
    requests: float
    wal: float

    def minus(self, idle: Cost) -> Cost:
        """This window less what the idle pool would have cost over as long."""
        share = self.seconds / idle.seconds
        return Cost(self.seconds, self.cpu - idle.cpu * share,
                    self.commands - idle.commands * share, self.scripts - idle.scripts * share,
                    self.requests - idle.requests * share, self.wal - idle.wal * share)

    def per(self, jobs: int) -> Cost:
        return Cost(self.seconds, self.cpu / jobs, self.commands / jobs, self.scripts / jobs,
                    self.requests / jobs, self.wal / jobs)


@dataclass(frozen=True)
class Outcome:
    system: str  # Redis, Celery, PostgreSQL
    size: int  # supervisors, or Celery workers
    idle: Cost
    per_job: Cost
    dispatch_rate: float
    producer_cpu: float  # the producer's own CPU seconds per dispatch
    host_busy: float  # the host's CPU busy share (all cores) while it dispatched
    paused_rate: float | None = None  # one-by-one dispatch with the handler paused

    @property
    def name(self) -> str:
        if self.system == "Celery":
            return f"Celery, {self.size} worker{'s' if self.size != 1 else ''}"
        return f"{self.system}, {self.size} sup{'s' if self.size != 1 else ''}"


def cost(before: Reading, after: Reading) -> Cost:
    delta = {name: count - before.calls.get(name, 0) for name, count in after.calls.items()}
    scripts = sum(delta.get(name, 0) for name in SCRIPT_CALLS)
    commands = sum(count for name, count in delta.items()
                   if name not in SCRIPT_CALLS and name not in OWN)
    return Cost(after.at - before.at, after.cpu - before.cpu,
                commands - (after.own_commands - before.own_commands), scripts,
                after.requests - before.requests - (after.own_requests - before.own_requests),
                after.wal - before.wal)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


class RedisReader:
    """redis-server's CPU, read() calls and `INFO commandstats`, and this script's own
    commands and requests (its polls and INFOs), to be left out."""

    def __init__(self, url: str) -> None:
        self._server = redis_process(url)
        self.raw = redis.Redis.from_url(url)
        self._own_commands = 0
        self._own_requests = 0

    def read(self) -> Reading:
        times = self._server.cpu_times()
        requests = self._server.io_counters().read_count
        own_commands, own_requests = self._own_commands, self._own_requests
        stats = self.raw.info("commandstats")  # read after: in the window it starts
        self._own_requests += 1
        calls = {name.removeprefix("cmdstat_"): int(value["calls"])
                 for name, value in stats.items()}
        return Reading(time.monotonic(), times.user + times.system, calls, requests,
                       own_commands=own_commands, own_requests=own_requests)

    def zcard(self, key: str) -> int:
        self._own_commands += 1
        self._own_requests += 1
        return int(self.raw.zcard(key))

    def existing(self, keys: list[str]) -> int:
        """How many of `keys` exist, 1,000 per EXISTS."""
        found = 0
        for start in range(0, len(keys), 1000):
            self._own_commands += 1
            self._own_requests += 1
            found += int(self.raw.exists(*keys[start:start + 1000]))
        return found

    def blocked_clients(self) -> int:
        self._own_requests += 1
        return int(self.raw.info("clients")["blocked_clients"])

    def close(self) -> None:
        self.raw.close()


class PostgresReader:
    """The PostgreSQL server's CPU, its clients' statements and transactions
    (pg_stat_statements), its WAL position, and the pool's succeeded jobs."""

    OWN_MARK = "/* scale_out */"  # this script's statements carry it, and are left out

    def __init__(self, server: PostgresServer, pool: str) -> None:
        self._postmaster = psutil.Process(
            int((server.data / "postmaster.pid").read_text().split()[0]))
        self._conn = psycopg.connect(server.url, autocommit=True)
        self._conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self._pool = pool

    def cpu(self) -> float:
        times = self._postmaster.cpu_times()
        total = times.user + times.system + times.children_user + times.children_system
        for child in self._postmaster.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                child_times = child.cpu_times()
                total += child_times.user + child_times.system
        return total

    def read(self) -> Reading:
        row = self._conn.execute(
            f"{self.OWN_MARK} SELECT coalesce(sum(calls), 0), coalesce(sum(calls) FILTER ("
            "WHERE query ILIKE 'BEGIN%%'), 0), "
            "pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint FROM pg_stat_statements "
            "WHERE toplevel AND query NOT LIKE %s AND query NOT ILIKE 'CREATE EXTENSION%%'",
            [f"{self.OWN_MARK}%"]).fetchone()
        statements, transactions, wal = (int(value) for value in row) if row else (0, 0, 0)
        return Reading(time.monotonic(), self.cpu(),
                       {"statements": statements, "eval": transactions}, wal=wal)

    def succeeded(self) -> int:
        row = self._conn.execute(f"{self.OWN_MARK} SELECT count(*) FROM poolsup.jobs "
                                 "WHERE pool = %s AND state = 'succeeded'",
                                 [self._pool]).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self._conn.close()


Reader = RedisReader | PostgresReader


@contextlib.contextmanager
def store_server(kind: str, pool: str, durable: bool) -> Iterator[tuple[str, Reader]]:
    """(url, a reader) for a fresh private server."""
    if kind == "redis":
        with redis_server() as url, contextlib.closing(RedisReader(url)) as reader:
            yield url, reader
        return
    server = PostgresServer(durable=durable,
                            settings={"shared_preload_libraries": "pg_stat_statements",
                                      "pg_stat_statements.track": "top"}).start()
    try:
        with contextlib.closing(PostgresReader(server, pool)) as postgres:
            yield server.url, postgres
    finally:
        server.remove()


@dataclass(frozen=True)
class Window:
    """What the idle system cost, and what the jobs cost beyond it."""

    idle: Cost
    per_job: Cost
    dispatch_rate: float
    producer_cpu: float
    host_busy: float


def run_jobs(reader: Reader, dispatch: Callable[[int], object], ended: Callable[[], bool],
             args: argparse.Namespace) -> Window:
    """Measure the ready, idle system for `--idle-seconds`; then dispatch `--jobs` one by
    one, wait until `ended`, and measure the window, the idle cost subtracted."""
    time.sleep(2)  # let the start settle
    start = reader.read()
    time.sleep(args.idle_seconds)
    idle = cost(start, reader.read())
    start = reader.read()
    producer_began = time.process_time()
    psutil.cpu_percent()
    for index in range(args.jobs):
        dispatch(index)
    dispatched = time.monotonic() - start.at
    host_busy = psutil.cpu_percent() / 100
    producer_cpu = (time.process_time() - producer_began) / args.jobs
    wait_until(ended, 300, f"{args.jobs} jobs to end")
    active = cost(start, reader.read()).minus(idle)
    return Window(idle, active.per(args.jobs), args.jobs / dispatched, producer_cpu,
                  host_busy)


def measure(store: str, size: int, args: argparse.Namespace) -> Outcome:
    directory = Path(tempfile.mkdtemp(prefix="poolsup-scale-out-"))
    pool = f"bench-{uuid.uuid4().hex[:8]}"
    with store_server(store, pool, args.pg_durable) as (url, reader), \
            contextlib.ExitStack() as stack:
        for n in range(size):
            stack.enter_context(supervisor(directory, url, pool, handlers=HANDLERS,
                                           name=f"s{n}.toml", id=f"s{n}",
                                           capacity=args.capacity))
        client = Client(url, pool=pool)
        stack.callback(client.close)

        def all_idle() -> bool:
            members = client.status()["supervisors"]
            return len(members) == size and all(
                member["state"] == "running" and member["running"] == 0 for member in members)

        wait_until(all_idle, 120, f"{size} idle supervisors")
        succeeded = PoolKeys(pool).by_state["succeeded"]

        def all_succeeded() -> bool:
            if isinstance(reader, PostgresReader):
                return reader.succeeded() >= args.jobs
            return reader.zcard(succeeded) >= args.jobs

        window = run_jobs(reader, lambda index: client.dispatch(
            f"noop-{index}", None, handler="noop"), all_succeeded, args)
        counts = client.status()["counts"]
        if counts["succeeded"] != args.jobs:
            raise SystemExit(f"expected {args.jobs} succeeded jobs, got {counts}")
        # The same dispatches with the handler paused: the wake-ups and claims happen,
        # no job runs, so the producer does not share the cores with the jobs it starts.
        client.pause(["noop"])
        began = time.monotonic()
        for index in range(args.jobs):
            client.dispatch(f"paused-{index}", None, handler="noop")
        paused_rate = args.jobs / (time.monotonic() - began)
        client.resume(["noop"])
    return Outcome("PostgreSQL" if store == "postgres" else "Redis", size, window.idle,
                   window.per_job, window.dispatch_rate, window.producer_cpu,
                   window.host_busy, paused_rate)


def measure_celery(count: int, args: argparse.Namespace) -> Outcome:
    """`count` Celery workers, prefork pools of `--capacity`, on a fresh redis-server: the
    no-op task sent one by one with `.delay()`, the result backend on the same Redis."""
    directory = Path(tempfile.mkdtemp(prefix="poolsup-scale-out-celery-"))
    # Celery's default queue, where `.delay()` sends: the redis-server is this run's own.
    commands = [command for n in range(count)
                for command in celery_worker_command("celery", args.capacity, f"w{n}")]
    with redis_server() as url, contextlib.closing(RedisReader(url)) as reader, \
            workers(commands, directory / "celery.log", url):
        app = peers_tasks.celery_app(url)
        try:
            noop = app.tasks[peers_tasks.NOOP]
            wait_until(lambda: reader.blocked_clients() >= count, 180,
                       f"{count} Celery workers in BRPOP (log: {directory / 'celery.log'})")
            keys: list[str] = []

            def dispatch(index: int) -> None:
                keys.append(app.backend.get_key_for_task(noop.delay().id))

            window = run_jobs(reader, dispatch, lambda: reader.existing(keys) >= args.jobs,
                              args)
            states = {json.loads(raw)["status"] for raw in reader.raw.mget(keys)}
            if states != {"SUCCESS"}:
                raise SystemExit(f"Celery tasks ended {states}; see {directory / 'celery.log'}")
        finally:
            app.close()
    return Outcome("Celery", count, window.idle, window.per_job, window.dispatch_rate,
                   window.producer_cpu, window.host_busy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="redis",
                        help="redis, postgres, or both comma-separated (default redis)")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--supervisors", default="1,16",
                        help="pool sizes, comma-separated (default 1,16)")
    parser.add_argument("--capacity", type=int, default=4)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument("--celery-workers", default=None,
                        help="with --store redis, Celery runs beside it with these counts of "
                             "workers, comma-separated (default: the pool sizes; '' for none)")
    add_postgres_options(parser)
    args = parser.parse_args()
    stores = args.store.split(",")
    if not set(stores) <= {"redis", "postgres"}:
        parser.error(f"--store: redis, postgres, or both (got {args.store!r})")
    sizes = [int(size) for size in args.supervisors.split(",")]
    celery = ([] if "redis" not in stores else sizes if args.celery_workers is None
              else [int(count) for count in args.celery_workers.split(",") if count])
    outcomes: list[Outcome] = []
    for store in stores:
        for size in sizes:
            outcomes.append(measure(store, size, args))
            if store == "redis" and size in celery:
                outcomes.append(measure_celery(size, args))
        if store == "redis":
            outcomes += [measure_celery(count, args) for count in celery if count not in sizes]
    print_table(outcomes, args)


def print_table(outcomes: list[Outcome], args: argparse.Namespace) -> None:
    def each(show: Callable[[Outcome], str], only: tuple[str, ...] = ()) -> list[str]:
        return [show(o) if not only or o.system in only else "-" for o in outcomes]

    redis_like = ("Redis", "Celery")
    rows = [
        ("the server's CPU ms per job", each(lambda o: f"{1000 * o.per_job.cpu:.3f}")),
        ("commands per job (Redis: in scripts too; PostgreSQL: statements)",
         each(lambda o: f"{o.per_job.commands:.1f}")),
        ("script calls per job (Redis: eval/evalsha/fcall; PostgreSQL: transactions)",
         each(lambda o: f"{o.per_job.scripts:.2f}")),
        ("requests per job (redis-server's reads: about one per round trip)",
         each(lambda o: f"{o.per_job.requests:.1f}", redis_like)),
        ("WAL bytes per job", each(lambda o: f"{o.per_job.wal:.0f}", ("PostgreSQL",))),
        ("one-by-one dispatch, jobs/s", each(lambda o: f"{o.dispatch_rate:.0f}")),
        ("  the same with the handler paused (no job runs)",
         each(lambda o: f"{o.paused_rate:.0f}" if o.paused_rate else "-")),
        ("  the producer's CPU ms per dispatch", each(lambda o: f"{1000 * o.producer_cpu:.2f}")),
        ("  the host's cores busy while it dispatched",
         each(lambda o: f"{100 * o.host_busy:.0f}%")),
        ("idle: the server's CPU %", each(lambda o: f"{100 * o.idle.cpu / o.idle.seconds:.2f}")),
        ("idle: commands/s", each(lambda o: f"{o.idle.commands / o.idle.seconds:.1f}")),
        ("idle: script calls/s", each(lambda o: f"{o.idle.scripts / o.idle.seconds:.1f}")),
        ("idle: WAL bytes/s", each(lambda o: f"{o.idle.wal / o.idle.seconds:.0f}",
                                   ("PostgreSQL",))),
        ("active window s", each(lambda o: f"{o.per_job.seconds:.1f}")),
    ]
    width = max(len(label) for label, _ in rows)
    columns = [max(len(o.name), 8) for o in outcomes]
    celery = [o for o in outcomes if o.system == "Celery"]
    peer = (f" (Celery: prefork, concurrency {args.capacity} per worker, result backend on)"
            if celery else "")
    print(f"{args.jobs} no-op jobs dispatched one by one, capacity {args.capacity} per "
          f"supervisor{peer}; idle cost subtracted (measured over {args.idle_seconds:g} s)")
    if any(o.system == "PostgreSQL" for o in outcomes):
        print(f"PostgreSQL: {postgres_mode(args.pg_durable)}")
    print(" " * width + "  " + "  ".join(o.name.rjust(w) for o, w in zip(outcomes, columns,
                                                                         strict=True)))
    for label, values in rows:
        print(label.ljust(width) + "  " + "  ".join(value.rjust(w) for value, w in zip(
            values, columns, strict=True)))
    for system in ("Redis", "PostgreSQL"):
        mine = [o for o in outcomes if o.system == system]
        if len(mine) > 1:
            first, last = mine[0], mine[-1]
            assert first.paused_rate and last.paused_rate
            print(f"{system}: dispatch rate {last.size}/{first.size}: "
                  f"{last.dispatch_rate / first.dispatch_rate:.2f}x; with the handler paused "
                  f"{last.paused_rate / first.paused_rate:.2f}x")
    for ours in (o for o in outcomes if o.system == "Redis" and celery):
        theirs = next((o for o in celery if o.size == ours.size), celery[0])
        print(f"poolsup/Celery ({ours.name} / {theirs.name}): server CPU per job "
              f"{ours.per_job.cpu / theirs.per_job.cpu:.2f}x, commands per job "
              f"{ours.per_job.commands / theirs.per_job.commands:.2f}x", flush=True)


if __name__ == "__main__":
    main()
