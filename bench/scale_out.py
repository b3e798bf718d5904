"""What a pool costs its store per job as it grows: the same no-op jobs through a pool of
1 and of 16 idle supervisors, each on a fresh private redis-server (or, with `--store
postgres`, a fresh PostgreSQL server: tests/helpers/postgres_server.py, fsync off).

    python bench/scale_out.py [--store redis|postgres|redis,postgres] [--jobs 1000]
                              [--supervisors 1,16] [--capacity 4] [--idle-seconds 5]

For each pool size: start the supervisors (capacity `--capacity`, the no-op handler of
handlers/noop.py, default settings otherwise; the job history is always kept), wait until
every one is registered and idle, and measure the idle pool for `--idle-seconds`:
redis-server's CPU (user + system, psutil) and `INFO commandstats`.  Then dispatch
`--jobs` jobs one by one through `supervisor.Client` (the dispatch rate is jobs / the
dispatch's wall time), wait until all have succeeded, and measure again.  The idle
pool's rates times the active window's length are subtracted, and what is left is
divided by the jobs.

Then the same number of jobs is dispatched one by one with the handler paused: the
wake-ups and the claims they cause still happen, but no job runs, so the rate is the
store's and the pool's, not the producer's share of cores busy with the jobs it started.
The producer's own CPU per dispatch and how busy the host's cores were are printed too.

Commands are every command in `INFO commandstats`, which counts the commands run inside
scripts; the script calls themselves (eval, evalsha, fcall and their _ro forms) are not
among them but are counted on their own row.  This script's own commands are left out:
INFO, CONFIG and the ZCARD polls of the wait for the jobs to succeed.

On PostgreSQL the server's CPU is that of the postmaster and every backend (psutil; the
backends that exited meanwhile through the postmaster's children times); "commands" are
the statements clients sent (pg_stat_statements, top level: counted at once, where
pg_stat_database's transaction counts reach the shared view up to 10 s late), and
"script calls" the transactions among them (each BEGIN; a statement run on its own, as
LISTEN, is its own transaction and not counted).  This script's own statements are left
out.

    python bench/scale_out.py --store redis,postgres   # both, in one run, side by side
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import psycopg
import redis
from common import redis_server, supervisor

from supervisor import Client
from supervisor.store.redis.keys import PoolKeys
from tests.helpers.postgres_server import PostgresServer

HANDLERS = {"noop": {"path": "noop.py"}}
SCRIPT_CALLS = ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")
OWN = ("info", "config")  # this script's instruments


@dataclass(frozen=True)
class Reading:
    at: float
    cpu: float  # redis-server's user + system seconds
    calls: dict[str, int]  # command -> calls


@dataclass(frozen=True)
class Cost:
    seconds: float
    cpu: float
    commands: float
    scripts: float

    def minus(self, idle: Cost) -> Cost:
        """This window less what the idle pool would have cost over as long."""
        share = self.seconds / idle.seconds
        return Cost(self.seconds, self.cpu - idle.cpu * share,
                    self.commands - idle.commands * share, self.scripts - idle.scripts * share)


@dataclass(frozen=True)
class Outcome:
    supervisors: int
    idle: Cost
    per_job: Cost
    dispatch_rate: float
    producer_cpu: float  # the producer's own CPU seconds per dispatch
    paused_rate: float  # one-by-one dispatch with the handler paused: no job runs
    host_busy: float  # the host's CPU busy share (all cores) while it dispatched


def redis_process(url: str) -> psutil.Process:
    port = url.rsplit(":", 1)[1].split("/")[0]
    for process in psutil.process_iter(["name", "cmdline"]):
        if process.info["name"] == "redis-server" and port in " ".join(process.info["cmdline"]):
            return process
    raise SystemExit(f"no redis-server on port {port}")


def read(server: psutil.Process, raw: redis.Redis) -> Reading:
    if isinstance(raw, PostgresReader):
        return raw.read()
    stats = raw.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}
    times = server.cpu_times()
    return Reading(time.monotonic(), times.user + times.system, calls)


def cost(before: Reading, after: Reading, own_commands: int = 0) -> Cost:
    delta = {name: count - before.calls.get(name, 0) for name, count in after.calls.items()}
    scripts = sum(delta.get(name, 0) for name in SCRIPT_CALLS)
    commands = sum(count for name, count in delta.items()
                   if name not in SCRIPT_CALLS and name not in OWN) - own_commands
    return Cost(after.at - before.at, after.cpu - before.cpu, commands, scripts)


def wait_until(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


class PostgresReader:
    """The PostgreSQL server's CPU, its clients' statements and transactions
    (pg_stat_statements), and the pool's succeeded jobs."""

    OWN_MARK = "/* scale_out */"  # this script's statements carry it, and are left out

    def __init__(self, server: PostgresServer, pool: str) -> None:
        self._postmaster = psutil.Process(
            int((server.data / "postmaster.pid").read_text().split()[0]))
        self._conn = psycopg.connect(server.url, autocommit=True)
        self._conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self._pool = pool
        self.own = 0  # kept for the Redis reader's interface: own statements are left out

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
            "WHERE query ILIKE 'BEGIN%%'), 0) FROM pg_stat_statements WHERE toplevel "
            "AND query NOT LIKE %s AND query NOT ILIKE 'CREATE EXTENSION%%'",
            [f"{self.OWN_MARK}%"]).fetchone()
        statements, transactions = (int(value) for value in row) if row else (0, 0)
        return Reading(time.monotonic(), self.cpu(),
                       {"statements": statements, "eval": transactions})

    def succeeded(self) -> int:
        row = self._conn.execute(f"{self.OWN_MARK} SELECT count(*) FROM poolsup.jobs "
                                 "WHERE pool = %s AND state = 'succeeded'",
                                 [self._pool]).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self._conn.close()


@contextlib.contextmanager
def store_server(kind: str, pool: str) -> Iterator[tuple[str, Any, Any]]:
    """(url, the server process or None, a reader) for a fresh private server."""
    if kind == "redis":
        with redis_server() as url:
            raw = redis.Redis.from_url(url)
            try:
                yield url, redis_process(url), raw
            finally:
                raw.close()
        return
    server = PostgresServer(settings={"shared_preload_libraries": "pg_stat_statements",
                                      "pg_stat_statements.track": "top"}).start()
    reader = PostgresReader(server, pool)
    try:
        yield server.url, None, reader
    finally:
        reader.close()
        server.remove()


def measure(store: str, size: int, args: argparse.Namespace) -> Outcome:
    directory = Path(tempfile.mkdtemp(prefix="poolsup-scale-out-"))
    pool = f"bench-{uuid.uuid4().hex[:8]}"
    with store_server(store, pool) as (url, server, raw), \
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
        time.sleep(2)  # let the joins settle
        start = read(server, raw)
        time.sleep(args.idle_seconds)
        idle = cost(start, read(server, raw))

        succeeded = PoolKeys(pool).by_state["succeeded"]
        polls = 0

        def all_succeeded() -> bool:
            nonlocal polls
            if isinstance(raw, PostgresReader):
                return raw.succeeded() >= args.jobs
            polls += 1
            return int(raw.zcard(succeeded)) >= args.jobs

        start = read(server, raw)
        producer_began = time.process_time()
        psutil.cpu_percent()
        for index in range(args.jobs):
            client.dispatch(f"noop-{index}", None, handler="noop")
        dispatched = time.monotonic() - start.at
        host_busy = psutil.cpu_percent() / 100
        producer_cpu = (time.process_time() - producer_began) / args.jobs
        wait_until(all_succeeded, 300, f"{args.jobs} jobs to succeed")
        end = read(server, raw)
        if isinstance(raw, PostgresReader):
            polls = 0  # its own statements are left out by the reader
        active = cost(start, end, own_commands=polls).minus(idle)
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
    per_job = Cost(active.seconds, active.cpu / args.jobs, active.commands / args.jobs,
                   active.scripts / args.jobs)
    return Outcome(size, idle, per_job, args.jobs / dispatched, producer_cpu, paused_rate,
                   host_busy)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", default="redis",
                        help="redis, postgres, or both comma-separated (default redis)")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--supervisors", default="1,16",
                        help="pool sizes, comma-separated (default 1,16)")
    parser.add_argument("--capacity", type=int, default=4)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    args = parser.parse_args()
    stores = args.store.split(",")
    if not set(stores) <= {"redis", "postgres"}:
        parser.error(f"--store: redis, postgres, or both (got {args.store!r})")
    sizes = [int(size) for size in args.supervisors.split(",")]
    runs = [(store, measure(store, size, args)) for store in stores for size in sizes]
    outcomes = [outcome for _, outcome in runs]

    names = [f"{'PostgreSQL' if store == 'postgres' else 'Redis'}, {o.supervisors} "
             f"sup{'s' if o.supervisors != 1 else ''}" for store, o in runs]
    rows = [
        ("the server's CPU ms per job", [f"{1000 * o.per_job.cpu:.3f}" for o in outcomes]),
        ("commands per job (Redis: in scripts too; PostgreSQL: statements)",
         [f"{o.per_job.commands:.1f}" for o in outcomes]),
        ("script calls per job (Redis: eval/evalsha/fcall; PostgreSQL: transactions)",
         [f"{o.per_job.scripts:.2f}" for o in outcomes]),
        ("one-by-one dispatch, jobs/s", [f"{o.dispatch_rate:.0f}" for o in outcomes]),
        ("  the same with the handler paused (no job runs)",
         [f"{o.paused_rate:.0f}" for o in outcomes]),
        ("  the producer's CPU ms per dispatch", [f"{1000 * o.producer_cpu:.2f}"
                                                   for o in outcomes]),
        ("  the host's cores busy while it dispatched", [f"{100 * o.host_busy:.0f}%"
                                                         for o in outcomes]),
        ("idle pool: the server's CPU %", [f"{100 * o.idle.cpu / o.idle.seconds:.2f}"
                                           for o in outcomes]),
        ("idle pool: commands/s", [f"{o.idle.commands / o.idle.seconds:.1f}"
                                   for o in outcomes]),
        ("idle pool: script calls/s", [f"{o.idle.scripts / o.idle.seconds:.1f}"
                                       for o in outcomes]),
        ("active window s", [f"{o.per_job.seconds:.1f}" for o in outcomes]),
    ]
    width = max(len(label) for label, _ in rows)
    columns = [max(len(name), 8) for name in names]
    print(f"{args.jobs} no-op jobs dispatched one by one, capacity {args.capacity} per "
          f"supervisor; idle cost subtracted (measured over {args.idle_seconds:g} s)")
    print(" " * width + "  " + "  ".join(name.rjust(w) for name, w in zip(names, columns,
                                                                             strict=True)))
    for label, values in rows:
        print(label.ljust(width) + "  " + "  ".join(value.rjust(w) for value, w in zip(
            values, columns, strict=True)))
    for store in stores:
        mine = [o for kind, o in runs if kind == store]
        if len(mine) > 1:
            first, last = mine[0], mine[-1]
            print(f"{store}: dispatch rate {last.supervisors}/{first.supervisors}: "
                  f"{last.dispatch_rate / first.dispatch_rate:.2f}x; with the handler paused "
                  f"{last.paused_rate / first.paused_rate:.2f}x", flush=True)


if __name__ == "__main__":
    main()
