"""poolsup against its peers, RQ's forking worker and Celery's prefork pool, in one run.

    python bench/peers.py [--jobs 2000] [--samples 300] [--warmup 20] [--workers N]
                          [--systems poolsup,poolsup-reused,rq,celery] [--check]

Everything runs on the same private redis-server, one system after the other, each with
`--workers` worker processes (default: os.cpu_count()):

- throughput: `--jobs` no-op jobs are queued first, then the workers are started;
  jobs/s = jobs / (first job start to last job finish), from the systems' own records:
  poolsup's started_at/finished_at, RQ's started_at/ended_at, and for Celery the start
  time the task returns and the result's date_done.  poolsup and RQ run each job in a
  fresh process; Celery's prefork pool reuses its children, and so does
  "poolsup-reused" (its handlers have max_jobs_per_child = 100).
- latency: with idle workers, `--warmup` + `--samples` sequential jobs; the dispatcher
  records time.time() before enqueueing, the job records time.time() when it starts.

Prints one table with the targets beside the figures (bench/README.md, "Targets": fresh
processes at least 4x RQ's throughput, and checked here too at least Celery's; reused
children at least 1.5x Celery's; dispatch to start p50 / p99 under 5 / 10 ms and no
higher than Celery's in the same run), and the CPU per job of each part of each system
over its throughput phase (bench/cpu_split.py), and writes the raw numbers to
bench/results/peers-<timestamp>.json.  With --check, exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.metadata
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import peers_tasks
import psutil
from common import percentile, redis_server, supervisor
from cpu_split import Part, per_job_ms, redis_process, snapshot, wait_exited
from floor import floor_throughput

from supervisor import Client
from tests.helpers.pool import wait_for

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
SYSTEMS = ("floor", "poolsup", "poolsup-reused", "rq", "celery")
REUSED_JOBS_PER_CHILD = 100
LABELS = {"poolsup": "poolsup", "rq": "RQ Worker (fork)", "celery": "Celery prefork",
          "floor": "floor (bare fork per job, 1 round trip)",
          "poolsup-reused": f"poolsup (reused, max_jobs_per_child={REUSED_JOBS_PER_CHILD})"}
LABEL_WIDTH = max(len(label) for label in LABELS.values())
POLL = 0.002  # seconds between status polls while waiting for a latency sample
# The CPU table's columns, and the column of each system's parts (cpu_split).
CPU_COLUMNS = ("supervisor/main", "fork server", "children", "redis", "total")
CPU_COLUMN_OF = {"supervisor": "supervisor/main", "parents": "supervisor/main",
                 "workers": "supervisor/main", "main": "supervisor/main",
                 "fork server": "fork server", "children": "children",
                 "work horses": "children", "pool children": "children",
                 "redis": "redis", "total": "total"}

# The targets of bench/README.md, "Targets".
TARGET_VS_RQ = 4.0
TARGET_VS_CELERY = 1.0
TARGET_P50_MS = 5.0
TARGET_P99_MS = 10.0


def stop_processes(processes: list[subprocess.Popen[bytes]], grace: float = 15.0) -> None:
    """SIGTERM (a warm shutdown for RQ and Celery), then SIGKILL to each process group."""
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # its own session: see workers()
            process.wait(10)
    # Celery's pool children share their parent's process group: none may outlive it.
    for process in processes:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


@contextlib.contextmanager
def workers(commands: list[list[str]], log: Path, redis_url: str
            ) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Worker processes run from bench/, each in a new session, always stopped."""
    env = {**os.environ, "PEERS_REDIS_URL": redis_url,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCH),
                                                       os.environ.get("PYTHONPATH")]))}
    processes: list[subprocess.Popen[bytes]] = []
    with log.open("ab") as log_file:
        try:
            for command in commands:
                processes.append(subprocess.Popen(
                    command, cwd=BENCH, env=env, stdin=subprocess.DEVNULL, stdout=log_file,
                    stderr=subprocess.STDOUT, start_new_session=True))
            yield processes
        finally:
            stop_processes(processes)


def throughput_result(starts: list[float], finishes: list[float], launched: float,
                      jobs: int) -> dict[str, Any]:
    first, last = min(starts), max(finishes)
    return {
        "jobs": jobs,
        "completed": len(finishes),
        "first_start": first,
        "last_finish": last,
        "span_s": last - first,
        "jobs_per_s": jobs / (last - first),
        "wall_s": last - launched,  # from starting the workers, startup included
        "starts": starts,
        "finishes": finishes,
    }


def sample_latency(dispatch: Callable[[int], Any], started: Callable[[Any], float],
                   samples: int, warmup: int) -> dict[str, Any]:
    values: list[float] = []
    for index in range(warmup + samples):
        sent = time.time()
        handle = dispatch(index)
        began = started(handle)
        if index >= warmup:
            values.append((began - sent) * 1000)
    return {
        "samples": len(values),
        "warmup": warmup,
        "p50_ms": percentile(values, 0.50),
        "p99_ms": percentile(values, 0.99),
        "max_ms": max(values),
        "mean_ms": sum(values) / len(values),
        "values_ms": values,
    }


# --- poolsup ------------------------------------------------------------------------


def poolsup_throughput(url: str, args: argparse.Namespace, directory: Path,
                       jobs_per_child: int = 1) -> dict[str, Any]:
    pool = f"peers-tp-{uuid.uuid4().hex[:8]}"
    client = Client(url, pool=pool)
    try:
        for index in range(args.jobs):
            client.dispatch(f"noop-{index}", None, handler="noop")
        handlers = {"noop": {"path": "noop.py", "timeout": 0,
                             "max_jobs_per_child": jobs_per_child}}
        server = redis_process(url)
        before = snapshot({"redis": Part(own=(server,))})
        launched = time.time()
        with supervisor(directory, url, pool, handlers=handlers, name="throughput.toml",
                        capacity=args.workers, lease_ttl=10) as process:
            wait_for(lambda: client.status()["counts"]["succeeded"] >= args.jobs,
                     args.timeout, message="poolsup jobs")
            run = psutil.Process(process.pid)  # `poolsup run`, started within this phase
            forkserver = only_child(run, "sandbox.forkserver")
            after = snapshot({"supervisor": Part(own=(run,)),
                              "fork server": Part(own=(forkserver,)),
                              "children": Part(below=(forkserver,)),
                              "redis": Part(own=(server,))})
            records = client.jobs(state="succeeded")
    finally:
        client.close()
    return {**throughput_result([float(r["started_at"]) for r in records],
                                [float(r["finished_at"]) for r in records], launched,
                                args.jobs),
            "cpu_ms_per_job": per_job_ms(before, after, args.jobs)}


def only_child(parent: psutil.Process, marker: str) -> psutil.Process:
    """The one child of `parent` whose command line contains `marker`."""
    found = [child for child in parent.children()
             if any(marker in part for part in child.cmdline())]
    if len(found) != 1:
        raise RuntimeError(f"{len(found)} children of {parent.pid} match {marker!r}")
    return found[0]


def poolsup_latency(url: str, args: argparse.Namespace, directory: Path,
                    jobs_per_child: int = 1) -> dict[str, Any]:
    pool = f"peers-lat-{uuid.uuid4().hex[:8]}"
    handlers = {"started": {"path": "noop.py", "function": "started", "timeout": 0,
                            "max_jobs_per_child": jobs_per_child}}
    with supervisor(directory, url, pool, handlers=handlers, name="latency.toml",
                    capacity=args.workers, lease_ttl=10):
        client = Client(url, pool=pool)
        try:
            def dispatch(index: int) -> str:
                key = f"lat-{index}"
                client.dispatch(key, None, handler="started")
                return key

            def started(key: str) -> float:
                def finished() -> dict[str, Any] | None:
                    record = client.job(key)
                    if record["state"] in ("failed", "stopped"):
                        raise RuntimeError(f"poolsup job {key} {record['state']}: {record}")
                    return record if record["state"] == "succeeded" else None
                record = wait_for(finished, args.timeout, POLL, message=f"poolsup job {key}")
                return float(record["result"]["started"])

            return sample_latency(dispatch, started, args.samples, args.warmup)
        finally:
            client.close()


# --- RQ -----------------------------------------------------------------------------


def rq_worker_commands(url: str, queue: str, count: int, *, burst: bool) -> list[list[str]]:
    command = [sys.executable, "-c", "import peers_tasks; peers_tasks.rq_worker_main()",
               url, queue]
    return [command + (["--burst"] if burst else []) for _ in range(count)]


def rq_time(value: datetime | None) -> float:
    assert value is not None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def rq_throughput(url: str, args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    from redis import Redis
    from rq import Queue
    from rq.job import Job, JobStatus

    connection = Redis.from_url(url)
    queue = Queue(f"peers-tp-{uuid.uuid4().hex[:8]}", connection=connection)
    try:
        ids: list[str] = []
        batch = 500
        for offset in range(0, args.jobs, batch):
            jobs = queue.enqueue_many([
                Queue.prepare_data(peers_tasks.NOOP, result_ttl=86400, ttl=86400)
                for _ in range(min(batch, args.jobs - offset))])
            ids += [job.id for job in jobs]
        server = redis_process(url)
        before = snapshot({"redis": Part(own=(server,))})
        launched = time.time()
        with workers(rq_worker_commands(url, queue.name, args.workers, burst=True),
                     directory / "rq-throughput.log", url) as processes:
            mains = tuple(psutil.Process(p.pid) for p in processes)
            # Burst workers exit once the queue is empty: read them exited, not yet reaped.
            wait_exited((p.pid for p in processes), args.timeout)
            after = snapshot({"workers": Part(own=mains), "work horses": Part(below=mains),
                              "redis": Part(own=(server,))})
        records = [job for job in Job.fetch_many(ids, connection=connection) if job]
        done = [job for job in records if job.get_status(refresh=False) == JobStatus.FINISHED]
        if len(done) != args.jobs:
            raise RuntimeError(f"RQ finished {len(done)} of {args.jobs} jobs; "
                               f"see {directory / 'rq-throughput.log'}")
        return {**throughput_result([rq_time(job.started_at) for job in done],
                                    [rq_time(job.ended_at) for job in done], launched,
                                    args.jobs),
                "cpu_ms_per_job": per_job_ms(before, after, args.jobs)}
    finally:
        connection.close()


def rq_latency(url: str, args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    from redis import Redis
    from rq import Queue, Worker
    from rq.job import Job, JobStatus

    connection = Redis.from_url(url)
    queue = Queue(f"peers-lat-{uuid.uuid4().hex[:8]}", connection=connection)
    try:
        with workers(rq_worker_commands(url, queue.name, args.workers, burst=False),
                     directory / "rq-latency.log", url):
            wait_for(lambda: Worker.count(connection=connection, queue=queue) >= args.workers,
                     60, message="RQ workers to register")

            def dispatch(index: int) -> Job:
                return queue.enqueue(peers_tasks.STARTED, result_ttl=3600)

            def started(job: Job) -> float:
                def finished() -> bool:
                    status = job.get_status()
                    if status in (JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED):
                        raise RuntimeError(f"RQ job {job.id} {status}")
                    return status == JobStatus.FINISHED
                wait_for(finished, args.timeout, POLL, message=f"RQ job {job.id}")
                return float(job.return_value(refresh=True))

            return sample_latency(dispatch, started, args.samples, args.warmup)
    finally:
        connection.close()


# --- Celery -------------------------------------------------------------------------


def celery_worker_command(queue: str, count: int, node: str = "") -> list[list[str]]:
    """One Celery worker consuming `queue`, a prefork pool of `count` children; its node
    name `node or queue`@host (a name each for several workers)."""
    return [[sys.executable, "-m", "celery", "-A", "peers_tasks:app", "worker",
             "--pool=prefork", f"--concurrency={count}", "-Q", queue,
             "-n", f"{node or queue}@%h", "--without-gossip", "--without-mingle",
             "--without-heartbeat", "--loglevel=WARNING"]]


def celery_throughput(url: str, args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    from redis import Redis

    app = peers_tasks.celery_app(url)
    connection = Redis.from_url(url)
    queue = f"peers-tp-{uuid.uuid4().hex[:8]}"
    try:
        with app.producer_or_acquire() as producer:
            ids = [app.send_task("peers_tasks.stamp", queue=queue, producer=producer).id
                   for _ in range(args.jobs)]
        keys = [app.backend.get_key_for_task(task_id) for task_id in ids]

        def stored() -> bool:
            return sum(int(connection.exists(*keys[i:i + 1000]))
                       for i in range(0, len(keys), 1000)) >= len(keys)

        server = redis_process(url)
        before = snapshot({"redis": Part(own=(server,))})
        launched = time.time()
        with workers(celery_worker_command(queue, args.workers),
                     directory / "celery-throughput.log", url) as processes:
            celery = psutil.Process(processes[0].pid)
            wait_for(stored, args.timeout, 0.1, message="Celery results")
            after = snapshot({"main": Part(own=(celery,)),
                              "pool children": Part(below=(celery,)),
                              "redis": Part(own=(server,))})
        metas = [json.loads(raw) for i in range(0, len(keys), 1000)
                 for raw in connection.mget(keys[i:i + 1000])]
        failed = [meta for meta in metas if meta["status"] != "SUCCESS"]
        if failed:
            raise RuntimeError(f"{len(failed)} Celery tasks failed: {failed[0]}")
        return {**throughput_result([float(meta["result"]) for meta in metas],
                                    [datetime.fromisoformat(meta["date_done"]).timestamp()
                                     for meta in metas], launched, args.jobs),
                "cpu_ms_per_job": per_job_ms(before, after, args.jobs)}
    finally:
        connection.close()
        app.close()


def celery_latency(url: str, args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    app = peers_tasks.celery_app(url)
    queue = f"peers-lat-{uuid.uuid4().hex[:8]}"
    try:
        with workers(celery_worker_command(queue, args.workers),
                     directory / "celery-latency.log", url):
            def dispatch(index: int) -> Any:
                return app.send_task(peers_tasks.STARTED, queue=queue)

            def started(result: Any) -> float:
                def finished() -> bool:
                    state = result.state
                    if state in ("FAILURE", "REVOKED"):
                        raise RuntimeError(f"Celery task {result.id} {state}")
                    return bool(state == "SUCCESS")
                # The first warm-up sample also waits for the worker to boot.
                wait_for(finished, max(args.timeout, 60), POLL, message=f"Celery task {result.id}")
                return float(result.result)

            return sample_latency(dispatch, started, args.samples, args.warmup)
    finally:
        app.close()


def floor_run(url: str, args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    return floor_throughput(url, args.jobs, args.workers)


def no_latency(url: str, args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    return {"error": "not measured"}


RUNNERS: dict[str, tuple[Callable[..., dict[str, Any]], Callable[..., dict[str, Any]]]] = {
    "floor": (floor_run, no_latency),
    "poolsup": (poolsup_throughput, poolsup_latency),
    "poolsup-reused": (
        functools.partial(poolsup_throughput, jobs_per_child=REUSED_JOBS_PER_CHILD),
        functools.partial(poolsup_latency, jobs_per_child=REUSED_JOBS_PER_CHILD),
    ),
    "rq": (rq_throughput, rq_latency),
    "celery": (celery_throughput, celery_latency),
}


# --- report -------------------------------------------------------------------------


def versions(packages: tuple[str, ...] = ("poolsup", "rq", "celery", "kombu", "redis")
             ) -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in packages:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[package] = importlib.metadata.version(package)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        found["redis-server"] = subprocess.run(
            ["redis-server", "--version"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    return found


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def targets(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    def value(system: str, phase: str, field: str) -> float | None:
        entry = results.get(system, {}).get(phase)
        return float(entry[field]) if isinstance(entry, dict) and field in entry else None

    ours = value("poolsup", "throughput", "jobs_per_s")
    reused = value("poolsup-reused", "throughput", "jobs_per_s")
    rq = value("rq", "throughput", "jobs_per_s")
    celery = value("celery", "throughput", "jobs_per_s")
    p50 = value("poolsup", "latency", "p50_ms")
    p99 = value("poolsup", "latency", "p99_ms")
    celery_p50 = value("celery", "latency", "p50_ms")
    celery_p99 = value("celery", "latency", "p99_ms")

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    rows = [
        ("poolsup throughput >= 4x RQ fork", ratio(ours, rq), TARGET_VS_RQ, ">=", "x"),
        ("poolsup throughput >= Celery prefork", ratio(ours, celery), TARGET_VS_CELERY,
         ">=", "x"),
        ("poolsup reused >= 1.5x Celery prefork", ratio(reused, celery), 1.5, ">=", "x"),
        ("poolsup latency p50 < 5 ms", p50, TARGET_P50_MS, "<", " ms"),
        ("poolsup latency p99 < 10 ms", p99, TARGET_P99_MS, "<", " ms"),
        ("poolsup p50 <= Celery p50", ratio(p50, celery_p50), 1.0, "<=", "x"),
        ("poolsup p99 <= Celery p99", ratio(p99, celery_p99), 1.0, "<=", "x"),
    ]
    return [{"target": name, "measured": measured, "limit": limit, "unit": unit.strip(),
             "met": None if measured is None else
             (measured >= limit if op == ">=" else
              measured <= limit if op == "<=" else measured < limit)}
            for name, measured, limit, op, unit in rows]


def print_table(results: dict[str, dict[str, Any]], checks: list[dict[str, Any]],
                settings: dict[str, Any]) -> None:
    print()
    print(f"peers: {settings['workers']} worker processes on {settings['cores']} cores, "
          f"{settings['jobs']} no-op jobs, {settings['samples']} latency samples "
          f"(+{settings['warmup']} warm-up), one redis-server; load average "
          f"{settings['loadavg_before'][0]:.2f} before, {settings['loadavg_after'][0]:.2f} after")
    header = (f"{'system':<{LABEL_WIDTH}} {'jobs/s':>8} {'span s':>8} {'wall s':>8} "
              f"{'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    print(header)
    print("-" * len(header))
    for system, entry in results.items():
        cells = [f"{LABELS[system]:<{LABEL_WIDTH}}"]
        tp, lat = entry.get("throughput"), entry.get("latency")
        if isinstance(tp, dict) and "jobs_per_s" in tp:
            cells += [f"{tp['jobs_per_s']:>8.0f}", f"{tp['span_s']:>8.2f}",
                      f"{tp['wall_s']:>8.2f}"]
        else:
            cells += [f"{'error':>8}", f"{'':>8}", f"{'':>8}"]
        if isinstance(lat, dict) and "p50_ms" in lat:
            cells += [f"{lat['p50_ms']:>8.2f}", f"{lat['p99_ms']:>8.2f}",
                      f"{lat['max_ms']:>8.2f}"]
        elif isinstance(lat, dict) and lat.get("error") == "not measured":
            cells += [f"{'-':>8}", f"{'-':>8}", f"{'-':>8}"]
        else:
            cells += [f"{'error':>8}", f"{'':>8}", f"{'':>8}"]
        print(" ".join(cells))
    floor = results.get("floor", {}).get("throughput", {})
    ours = results.get("poolsup", {}).get("throughput", {})
    if "jobs_per_s" in floor and "jobs_per_s" in ours:
        print(f"poolsup (a fresh process per job) runs at "
              f"{ours['jobs_per_s'] / floor['jobs_per_s']:.0%} of the floor's throughput")
    print_cpu_table(results)
    print()
    print("Targets (bench/README.md):")
    for check in checks:
        if check["measured"] is None:
            shown, verdict = "n/a", "not measured"
        else:
            shown = f"{check['measured']:.2f}{' ' if check['unit'] == 'ms' else ''}{check['unit']}"
            verdict = "met" if check["met"] else "MISSED"
        print(f"  {check['target']:<40} measured {shown:>10}   {verdict}")


def print_cpu_table(results: dict[str, dict[str, Any]]) -> None:
    """CPU per job of each part over the throughput phase (launch to last finish, startup
    included); `cores` is that CPU over the phase's wall time."""
    widths = [max(8, len(column)) for column in CPU_COLUMNS]
    print()
    header = "  ".join([f"{'CPU per job (ms)':<{LABEL_WIDTH}}",
                        *(f"{column:>{width}}" for column, width in zip(CPU_COLUMNS, widths,
                                                                         strict=True)),
                        f"{'cores':>6}"])
    print(header)
    print("-" * len(header))
    for system, entry in results.items():
        tp = entry.get("throughput")
        if not isinstance(tp, dict) or "cpu_ms_per_job" not in tp:
            continue
        by_column = {CPU_COLUMN_OF[part]: ms for part, ms in tp["cpu_ms_per_job"].items()}
        cells = [f"{by_column[column]:.2f}" if column in by_column else "-"
                 for column in CPU_COLUMNS]
        cores = by_column["total"] * tp["jobs"] / 1000 / tp["wall_s"]
        print("  ".join([f"{LABELS[system]:<{LABEL_WIDTH}}",
                         *(f"{cell:>{width}}" for cell, width in zip(cells, widths,
                                                                      strict=True)),
                         f"{cores:>6.2f}"]))
    print("supervisor/main: `poolsup run`, the floor's parents, RQ's workers, Celery's main "
          "process; children: the\njob processes; from launch (startup included) to the "
          "last finish; cores: CPU s / wall s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="no-op jobs per system")
    parser.add_argument("--samples", type=int, default=300, help="latency samples per system")
    parser.add_argument("--warmup", type=int, default=20, help="latency samples discarded")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="worker processes / capacity (default: cores)")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help="comma-separated subset of " + ",".join(SYSTEMS))
    parser.add_argument("--timeout", type=float, default=0.0,
                        help="seconds to wait per phase (default: 60 + jobs / 10)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args()
    systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    if unknown := set(systems) - set(SYSTEMS):
        parser.error(f"unknown systems: {', '.join(sorted(unknown))}")
    args.timeout = args.timeout or 60 + args.jobs / 10

    directory = Path(tempfile.mkdtemp(prefix="poolsup-peers-"))
    began = datetime.now(UTC)
    settings = {"jobs": args.jobs, "samples": args.samples, "warmup": args.warmup,
                "workers": args.workers, "cores": os.cpu_count(), "systems": systems,
                "cpu": cpu_model(), "platform": platform.platform(),
                "loadavg_before": [round(load, 2) for load in os.getloadavg()]}
    print(f"logs in {directory}", flush=True)
    with redis_server() as url:
        results = run_phases(url, {system: RUNNERS[system] for system in systems},
                             ("throughput", "latency"), args, directory, summarize)

    settings["loadavg_after"] = [round(load, 2) for load in os.getloadavg()]
    checks = targets(results)
    print_table(results, checks, settings)
    save_results("peers", began, {"settings": settings, "versions": versions(),
                                  "results": results, "targets": checks,
                                  "logs": str(directory)}, check=args.check)


Runner = Callable[[str, argparse.Namespace, Path], dict[str, Any]]


def run_phases(url: str, runners: dict[str, tuple[Runner, ...]], phases: tuple[str, ...],
               args: argparse.Namespace, directory: Path,
               summarize: Callable[[dict[str, Any]], str]) -> dict[str, dict[str, Any]]:
    """Each system's phases, one after another on the redis-server at `url`: per system
    and phase, what its runner measured, or the error that stopped it."""
    results: dict[str, dict[str, Any]] = {}
    for system, system_runners in runners.items():
        results[system] = {}
        for phase, runner in zip(phases, system_runners, strict=True):
            print(f"{system} {phase} ...", end=" ", flush=True)
            started = time.monotonic()
            try:
                entry = runner(url, args, directory)
            except Exception as error:
                traceback.print_exc()
                entry = {"error": f"{type(error).__name__}: {error}"}
            results[system][phase] = entry
            print(f"{summarize(entry)} ({time.monotonic() - started:.1f} s)", flush=True)
    return results


def summarize(entry: dict[str, Any]) -> str:
    if "jobs_per_s" in entry:
        return f"{entry['jobs_per_s']:.0f} jobs/s"
    if "p50_ms" in entry:
        return f"p50 {entry['p50_ms']:.2f} ms p99 {entry['p99_ms']:.2f} ms"
    return str(entry["error"])


def save_results(name: str, began: datetime, numbers: dict[str, Any], *, check: bool) -> None:
    """The run's numbers as JSON in bench/results; with `check`, exit 1 if a target
    (numbers["targets"]) was missed."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}-{began.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps({"started": began.isoformat(), **numbers}, indent=1))
    print(f"\nraw numbers: {path}")
    if check and not all(target["met"] for target in numbers["targets"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
