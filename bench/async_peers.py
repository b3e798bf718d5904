"""poolsup's shared async children against arq's and saq's workers, in one run.

    python bench/async_peers.py [--jobs 2000] [--hold 1000] [--seconds 30] [--workers N]
                                [--concurrency 100] [--hold-concurrency N]
                                [--systems poolsup,arq,saq] [--check]

Everything runs on the same private redis-server, one system after the other, each with
`--workers` worker processes (default: os.cpu_count()). poolsup is one supervisor whose
`async def` handlers have `child_concurrency = C` and whose capacity is workers * C (its
jobs share `workers` children); arq runs `workers` processes with `max_jobs = C`, saq
`workers` processes with `concurrency = C`.

- throughput (C = `--concurrency`): `--jobs` no-op async jobs are queued first, then
  the workers are started; jobs/s = jobs / (first job start to last job finish), from
  each system's own records: poolsup's started_at/finished_at, arq's result
  start_time/finish_time, saq's job started/completed.
- hold (C = `--hold-concurrency`, default hold / workers rounded up): `--hold` jobs that
  each `await asyncio.sleep(...)` are queued, the workers started; once every job runs
  and `--settle` seconds have passed, over `--seconds`: the CPU of the system's main
  processes (poolsup's supervisor; arq's and saq's workers) and of all its processes
  (poolsup: the supervisor and every descendant: fork server, children) as % of one
  core, redis-server's CPU %, and at the window's end the PSS of all the system's
  processes summed (psutil memory_full_info().pss). The jobs sleep `--seconds` + settle
  + 120 s, so all are still held when the window ends; the workers are stopped then.

Prints the two tables with the targets of bench/README.md, "Targets" ("Concurrent async
jobs": no-op jobs at least as many per second as arq's and saq's; 1,000 held sleeping jobs
under 300 MiB of PSS in all, the supervisor under 5% of a core and Redis under 2%) and
writes the raw numbers to bench/results/async_peers-<timestamp>.json.  With --check,
exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import platform
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import async_peers_tasks as tasks
import psutil
from common import redis_server, supervisor
from cpu_split import Part, redis_process, snapshot
from peers import cpu_model, run_phases, save_results, throughput_result, versions, workers

from supervisor import Client
from tests.helpers.pool import wait_for

BENCH = Path(__file__).resolve().parent
SYSTEMS = ("poolsup", "arq", "saq")
BATCH = 200  # jobs enqueued at once (asyncio.gather) by the arq and saq dispatchers
POLL = 0.1  # seconds between the dispatcher's completion polls
HOLD_MARGIN = 120.0  # seconds a held job sleeps beyond settle + window
LABELS = {"poolsup": "poolsup (shared async children)", "arq": "arq Worker",
          "saq": "saq Worker"}

# bench/README.md, "Targets", "Concurrent async jobs".
TARGET_VS_PEER = 1.0
TARGET_PSS_MIB = 300.0
TARGET_SUPERVISOR_PCT = 5.0
TARGET_REDIS_PCT = 2.0

T = TypeVar("T")


class Loop:
    """One event loop for a phase's asyncio clients (arq's and saq's are async only)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, awaitable: Awaitable[T]) -> T:
        async def wait() -> T:
            return await awaitable

        return self.loop.run_until_complete(wait())

    def batches(self, make: Callable[[int], Awaitable[T]], count: int) -> list[T]:
        """`make(0)` ... `make(count - 1)`, BATCH at a time."""
        async def batch(indexes: Iterable[int]) -> list[T]:
            return list(await asyncio.gather(*(make(index) for index in indexes)))

        found: list[T] = []
        for offset in range(0, count, BATCH):
            found += self.run(batch(range(offset, min(count, offset + BATCH))))
        return found

    def close(self) -> None:
        self.loop.close()


def hold_seconds(args: argparse.Namespace) -> float:
    return float(args.seconds + args.settle + HOLD_MARGIN)


def completed(starts: list[float], finishes: list[float], launched: float,
              args: argparse.Namespace, outcomes: Counter[str], log: Path) -> dict[str, Any]:
    """The throughput of the jobs that completed (jobs/s = completed / span); those that
    ended otherwise are counted by outcome, and fail the phase if over 1% of the jobs."""
    if len(starts) < 0.99 * args.jobs:
        raise RuntimeError(f"{len(starts)} of {args.jobs} jobs completed ({dict(outcomes)}); "
                           f"see {log}")
    return {**throughput_result(starts, finishes, launched, len(starts)),
            "queued": args.jobs, "not_completed": dict(outcomes)}


def tree(processes: Iterable[psutil.Process]) -> list[psutil.Process]:
    """The processes and all their descendants."""
    found: list[psutil.Process] = []
    for process in processes:
        found.append(process)
        with contextlib.suppress(psutil.NoSuchProcess):
            found += process.children(recursive=True)
    return found


def memory(processes: list[psutil.Process]) -> dict[str, Any]:
    """PSS and RSS of each process (smaps_rollup), summed."""
    each: list[dict[str, Any]] = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            info = process.memory_full_info()
            each.append({"pid": process.pid, "cmd": " ".join(process.cmdline())[:120],
                         "pss": info.pss, "rss": info.rss})
    return {"pss_mib": sum(entry["pss"] for entry in each) / 2**20,
            "rss_mib": sum(entry["rss"] for entry in each) / 2**20,
            "processes": len(each), "each": each}


def hold_window(args: argparse.Namespace, main: tuple[psutil.Process, ...],
                server: psutil.Process, held: Callable[[], int], launched: float
                ) -> dict[str, Any]:
    """Once `held()` counts every job: settle, then CPU over the window and PSS at its end.
    `main`: the supervisor (poolsup) or the worker processes; all = main and below;
    `launched`: time.monotonic() when they were started."""
    wait_for(lambda: held() >= args.hold, args.hold_timeout, 0.5, message="all jobs held")
    ramp = time.monotonic() - launched
    time.sleep(args.settle)
    parts = {"main": Part(own=main), "all": Part(own=main, below=main),
             "redis": Part(own=(server,))}
    before = snapshot(parts)
    start = time.monotonic()
    time.sleep(args.seconds)
    after = snapshot(parts)
    window = time.monotonic() - start
    used = memory(tree(main))
    return {"held_at_start": args.hold, "held_at_end": held(), "ramp_s": ramp,
            "window_s": window,
            **{f"{name}_cpu_pct": 100 * (after[name] - before[name]) / window
               for name in parts},
            **used}


# --- poolsup ------------------------------------------------------------------------


def poolsup_handlers(function: str, concurrency: int) -> dict[str, dict[str, object]]:
    return {function: {"path": "async_noop.py", "function": function, "timeout": 0,
                       "child_concurrency": concurrency}}


def poolsup_throughput(url: str, args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    pool = f"async-tp-{uuid.uuid4().hex[:8]}"
    with Client(url, pool=pool) as client:
        client.dispatch_many({"key": f"noop-{index}", "handler": "noop", "payload": {}}
                             for index in range(args.jobs))
        launched = time.time()
        with supervisor(directory, url, pool, name="throughput.toml",
                        handlers=poolsup_handlers("noop", args.concurrency),
                        capacity=args.workers * args.concurrency):
            wait_for(lambda: client.status()["counts"]["succeeded"] >= args.jobs,
                     args.timeout, POLL, message="poolsup jobs")
            records = client.jobs(state="succeeded")
    return throughput_result([float(r["started_at"]) for r in records],
                             [float(r["finished_at"]) for r in records], launched, args.jobs)


def poolsup_hold(url: str, args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    pool = f"async-hold-{uuid.uuid4().hex[:8]}"
    server = redis_process(url)
    with Client(url, pool=pool) as client:
        client.dispatch_many({"key": f"sleep-{index}", "handler": "sleeper",
                              "payload": {"seconds": hold_seconds(args)}}
                             for index in range(args.hold))
        launched = time.monotonic()
        with supervisor(directory, url, pool, name="hold.toml",
                        handlers=poolsup_handlers("sleeper", args.hold_concurrency),
                        capacity=args.workers * args.hold_concurrency,
                        drain_timeout=0) as process:  # at the end: stop the jobs at once
            return hold_window(args, (psutil.Process(process.pid),), server,
                               lambda: int(client.status()["counts"]["running"]), launched)


# --- arq ----------------------------------------------------------------------------


def arq_commands(url: str, queue: str, args: argparse.Namespace, concurrency: int,
                 job_timeout: float = 300.0) -> list[list[str]]:
    command = [sys.executable, "-c", "import async_peers_tasks; "
               "async_peers_tasks.arq_worker_main()", url, queue, str(concurrency),
               str(job_timeout)]
    return [command for _ in range(args.workers)]


def arq_throughput(url: str, args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    from arq.jobs import Job

    loop = Loop()
    arq = tasks.arq_redis(url)
    queue = f"async-tp-{uuid.uuid4().hex[:8]}"
    try:
        jobs = loop.batches(lambda _: arq.enqueue_job(tasks.NOOP, _queue_name=queue),
                            args.jobs)
        ids = [job.job_id for job in jobs if job is not None]
        launched = time.time()
        with workers(arq_commands(url, queue, args, args.concurrency),
                     directory / "arq-throughput.log", url):
            # arq removes a job from its queue's sorted set when the job ends.
            wait_for(lambda: loop.run(arq.zcard(queue)) == 0, args.timeout, POLL,
                     message="arq jobs")
        results = loop.batches(
            lambda index: Job(ids[index], arq, _queue_name=queue).result_info(), len(ids))
        done = [result for result in results if result is not None and result.success]
        outcomes = Counter("no result" if result is None else "failed"
                           for result in results if result is None or not result.success)
        return completed([result.start_time.timestamp() for result in done],
                         [result.finish_time.timestamp() for result in done], launched,
                         args, outcomes, directory / "arq-throughput.log")
    finally:
        loop.run(arq.aclose())
        loop.close()


def arq_hold(url: str, args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    from arq.constants import in_progress_key_prefix

    loop = Loop()
    arq = tasks.arq_redis(url)
    queue = f"async-hold-{uuid.uuid4().hex[:8]}"
    seconds = hold_seconds(args)
    try:
        loop.batches(lambda _: arq.enqueue_job(tasks.SLEEPER, seconds, _queue_name=queue),
                     args.hold)
        server = redis_process(url)

        def held() -> int:  # arq's in-progress keys: one per running job
            return len(loop.run(arq.keys(in_progress_key_prefix + "*")))

        launched = time.monotonic()
        with workers(arq_commands(url, queue, args, args.hold_concurrency, seconds + 60),
                     directory / "arq-hold.log", url) as processes:
            return hold_window(args, tuple(psutil.Process(p.pid) for p in processes), server,
                               held, launched)
    finally:
        loop.run(arq.aclose())
        loop.close()


# --- saq ----------------------------------------------------------------------------


def saq_commands(url: str, queue: str, args: argparse.Namespace, concurrency: int
                 ) -> list[list[str]]:
    command = [sys.executable, "-c", "import async_peers_tasks; "
               "async_peers_tasks.saq_worker_main()", url, queue, str(concurrency)]
    return [command for _ in range(args.workers)]


def saq_throughput(url: str, args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    from saq import Queue, Status

    loop = Loop()
    queue = Queue.from_url(tasks.unbounded(url), name=f"async-tp-{uuid.uuid4().hex[:8]}")
    loop.run(queue.connect())
    try:
        jobs = loop.batches(lambda _: queue.enqueue(tasks.NOOP), args.jobs)
        keys = [job.key for job in jobs if job is not None]
        launched = time.time()
        with workers(saq_commands(url, queue.name, args, args.concurrency),
                     directory / "saq-throughput.log", url):
            # saq removes a job from its queue's `incomplete` sorted set when it ends.
            wait_for(lambda: loop.run(queue.count("incomplete")) == 0, args.timeout, POLL,
                     message="saq jobs")
        records = loop.run(queue.jobs(keys))
        done = [job for job in records if job is not None and job.status == Status.COMPLETE]
        # A worker's sweep at its start aborts ("swept") a job another worker has just
        # taken from the queue but not yet marked active: such a job is counted here.
        outcomes = Counter("no record" if job is None else str(job.status).removeprefix("Status.")
                           for job in records if job is None or job.status != Status.COMPLETE)
        return completed([job.started / 1000 for job in done],  # ms since the epoch
                         [job.completed / 1000 for job in done], launched, args, outcomes,
                         directory / "saq-throughput.log")
    finally:
        loop.run(queue.disconnect())
        loop.close()


def saq_hold(url: str, args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    from saq import Queue

    loop = Loop()
    queue = Queue.from_url(tasks.unbounded(url), name=f"async-hold-{uuid.uuid4().hex[:8]}")
    loop.run(queue.connect())
    try:
        # timeout 0: no limit (saq's default is 10 s).
        loop.batches(lambda _: queue.enqueue(tasks.SLEEPER, seconds=hold_seconds(args),
                                             timeout=0), args.hold)
        server = redis_process(url)
        launched = time.monotonic()
        with workers(saq_commands(url, queue.name, args, args.hold_concurrency),
                     directory / "saq-hold.log", url) as processes:
            return hold_window(args, tuple(psutil.Process(p.pid) for p in processes), server,
                               lambda: loop.run(queue.count("active")), launched)
    finally:
        loop.run(queue.disconnect())
        loop.close()


RUNNERS: dict[str, tuple[Callable[..., dict[str, Any]], Callable[..., dict[str, Any]]]] = {
    "poolsup": (poolsup_throughput, poolsup_hold),
    "arq": (arq_throughput, arq_hold),
    "saq": (saq_throughput, saq_hold),
}


# --- report -------------------------------------------------------------------------


def targets(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []
    ours = results.get("poolsup", {})
    rate = ours.get("throughput", {}).get("jobs_per_s")
    for peer in ("arq", "saq"):
        theirs = results.get(peer, {}).get("throughput", {}).get("jobs_per_s")
        if rate and theirs:
            ratio = rate / theirs
            checks.append({"target": f"poolsup jobs/s >= {peer}", "measured": f"{ratio:.2f}x",
                           "met": ratio >= TARGET_VS_PEER})
    hold = ours.get("hold", {})
    if "pss_mib" in hold:
        checks += [
            {"target": f"poolsup PSS, all processes < {TARGET_PSS_MIB:.0f} MiB",
             "measured": f"{hold['pss_mib']:.0f} MiB", "met": hold["pss_mib"] < TARGET_PSS_MIB},
            {"target": f"poolsup supervisor < {TARGET_SUPERVISOR_PCT:.0f}% of a core",
             "measured": f"{hold['main_cpu_pct']:.1f}%",
             "met": hold["main_cpu_pct"] < TARGET_SUPERVISOR_PCT},
            {"target": f"Redis < {TARGET_REDIS_PCT:.0f}% of a core, poolsup holding",
             "measured": f"{hold['redis_cpu_pct']:.1f}%",
             "met": hold["redis_cpu_pct"] < TARGET_REDIS_PCT},
        ]
        if hold["held_at_end"] < hold["held_at_start"]:
            checks.append({"target": "poolsup holds every job over the window",
                           "measured": f"{hold['held_at_end']}", "met": False})
    return checks


def print_tables(results: dict[str, dict[str, Any]], checks: list[dict[str, Any]],
                 args: argparse.Namespace) -> None:
    names = LABELS
    width = max(len(name) for name in names.values())
    print(f"\nno-op async jobs: {args.jobs} queued, then {args.workers} worker processes "
          f"started, concurrency {args.concurrency} each")
    print(f"{'system':<{width}}  {'jobs/s':>8}  {'span s':>7}  {'wall s':>7}  {'x poolsup':>9}  "
          f"{'done':>11}")
    ours = results.get("poolsup", {}).get("throughput", {}).get("jobs_per_s")
    for system, entry in results.items():
        tp = entry.get("throughput", {})
        if "jobs_per_s" not in tp:
            print(f"{names[system]:<{width}}  {tp.get('error', 'not run')}")
            continue
        ratio = f"{ours / tp['jobs_per_s']:.2f}" if ours and system != "poolsup" else "-"
        done = f"{tp['completed']}/{tp.get('queued', tp['jobs'])}"
        print(f"{names[system]:<{width}}  {tp['jobs_per_s']:>8.0f}  {tp['span_s']:>7.2f}  "
              f"{tp['wall_s']:>7.2f}  {ratio:>9}  {done:>11}"
              + (f"  others: {tp['not_completed']}" if tp.get("not_completed") else ""))
    print("x poolsup: poolsup's jobs/s over this system's; done: jobs completed / queued "
          "(jobs/s counts the completed)")

    print(f"\nholding {args.hold} jobs that sleep: {args.workers} worker processes, "
          f"concurrency {args.hold_concurrency} each; CPU over {args.seconds:.0f} s")
    print(f"{'system':<{width}}  {'held':>9}  {'ramp s':>6}  {'PSS MiB':>7}  {'RSS MiB':>7}  "
          f"{'procs':>5}  {'main %':>6}  {'all %':>6}  {'redis %':>7}")
    for system, entry in results.items():
        hold = entry.get("hold", {})
        if "pss_mib" not in hold:
            print(f"{names[system]:<{width}}  {hold.get('error', 'not run')}")
            continue
        held = f"{hold['held_at_end']}/{hold['held_at_start']}"
        print(f"{names[system]:<{width}}  {held:>9}  {hold['ramp_s']:>6.1f}  "
              f"{hold['pss_mib']:>7.0f}  {hold['rss_mib']:>7.0f}  {hold['processes']:>5}  "
              f"{hold['main_cpu_pct']:>6.1f}  {hold['all_cpu_pct']:>6.1f}  "
              f"{hold['redis_cpu_pct']:>7.1f}")
    print("held: jobs running at the window's end / queued; ramp: from starting the "
          "system to every job running;\nPSS, RSS: all the system's "
          "processes at the window's end;\nmain %: poolsup's supervisor, arq's and saq's "
          "workers; all %: with every descendant (fork server, children); % of one core")
    if checks:
        print()
        for check in checks:
            print(f"  {check['target']:<44} measured {check['measured']:>9}   "
                  f"{'met' if check['met'] else 'MISSED'}")


def summarize(entry: dict[str, Any]) -> str:
    if "jobs_per_s" in entry:
        return f"{entry['jobs_per_s']:.0f} jobs/s"
    if "pss_mib" in entry:
        return (f"PSS {entry['pss_mib']:.0f} MiB, main {entry['main_cpu_pct']:.1f}%, "
                f"redis {entry['redis_cpu_pct']:.1f}%")
    return str(entry["error"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="no-op jobs per system")
    parser.add_argument("--hold", type=int, default=1000, help="sleeping jobs held at once")
    parser.add_argument("--seconds", type=float, default=30.0, help="the hold's window")
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds between all jobs held and the window")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="worker processes (poolsup: shared children; default: cores)")
    parser.add_argument("--concurrency", type=int, default=100,
                        help="jobs at once per worker process, throughput phase")
    parser.add_argument("--hold-concurrency", type=int, default=0,
                        help="jobs at once per worker process, hold phase "
                             "(default: hold / workers, rounded up)")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help="comma-separated subset of " + ",".join(SYSTEMS))
    parser.add_argument("--timeout", type=float, default=0.0,
                        help="seconds to wait for the throughput phase (default: 60 + jobs / 10)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args()
    systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    if unknown := set(systems) - set(SYSTEMS):
        parser.error(f"unknown systems: {', '.join(sorted(unknown))}")
    args.timeout = args.timeout or 60 + args.jobs / 10
    args.hold_timeout = 120 + args.hold / 10
    args.hold_concurrency = args.hold_concurrency or math.ceil(args.hold / args.workers)

    directory = Path(tempfile.mkdtemp(prefix="poolsup-async-peers-"))
    began = datetime.now(UTC)
    settings: dict[str, Any] = {key: value for key, value in vars(args).items()
                if isinstance(value, int | float | str)}
    settings.update({"systems": systems, "cores": os.cpu_count(), "cpu": cpu_model(),
                     "platform": platform.platform(),
                     "loadavg_before": [round(load, 2) for load in os.getloadavg()]})
    print(f"logs in {directory}", flush=True)
    with redis_server() as url:
        results = run_phases(url, {system: RUNNERS[system] for system in systems},
                             ("throughput", "hold"), args, directory, summarize)

    settings["loadavg_after"] = [round(load, 2) for load in os.getloadavg()]
    checks = targets(results)
    print_tables(results, checks, args)
    save_results("async_peers", began, {
        "settings": settings, "versions": versions(("poolsup", "arq", "saq", "redis", "hiredis")),
        "results": results, "targets": checks, "logs": str(directory)}, check=args.check)


if __name__ == "__main__":
    main()
