"""`python -m tests.chaos --minutes N --seed S [--store redis|sqlite|postgres] [--sentinel]`: a
randomized fault-injection run of a real pool, then the checker's verdict on its history.

One `random.Random(seed)` draws both plans (faults, workload) before anything starts, so
a seed replays the same schedule.  Exit 0 if the checker finds no violation, 1 if it
does; the run's directory (ledger, logs, report) is kept when it fails or with --keep.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from supervisor import Client
from tests.chaos.checker import Drain, History, Report, check, render
from tests.chaos.cluster import (
    LEASE_TTL,
    TICK_EVERY,
    TICK_SCHEDULE,
    Cluster,
    handlers,
    wait_until,
)
from tests.chaos.faults import FaultInjector
from tests.chaos.ledger import now, read_ledger
from tests.chaos.monitor import ProcessMonitor, job_processes_by_environment
from tests.chaos.plan import Fault, Work, plan_faults, plan_work
from tests.chaos.workload import Workload, retried

FINISH_WAIT = 120.0
PROCESSES_GONE_WAIT = 10.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--minutes", type=float, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--store", choices=("redis", "sqlite", "sentinel", "postgres"),
                        default="redis")
    parser.add_argument("--sentinel", action="store_true",
                        help="the store is a master and a replica behind three sentinels, "
                             "with failovers (some losing the last writes) among the faults; "
                             "as --store sentinel")
    parser.add_argument("--supervisors", type=int, default=3,
                        help="how many run from the start (default 3); one more joins and "
                             "leaves")
    parser.add_argument("--overlap", action="store_true",
                        help="the store's faults (Redis's, PostgreSQL's) at the same time as "
                             "the supervisors' faults")
    parser.add_argument("--reuse", type=int, default=1, metavar="N",
                        help="every handler but the long one runs up to N jobs per child "
                             "(max_jobs_per_child; default 1, a fresh child per job)")
    parser.add_argument("--dir", type=Path, help="where the run keeps its files")
    parser.add_argument("--keep", action="store_true", help="keep the run's files")
    return parser.parse_args(argv)


def chaos_run(minutes: float, seed: int, store: str, directory: Path,
              log: Callable[[str], None], supervisors: int = 3, overlap: bool = False,
              reuse: int = 1) -> Report:
    rng = random.Random(seed)
    seconds = minutes * 60
    run_id = f"c{seed}x{os.getpid()}"
    faults = plan_faults(rng, seconds, redis=store == "redis", lease_ttl=LEASE_TTL,
                         supervisors=supervisors, overlap=overlap,
                         sentinel=store == "sentinel", postgres=store == "postgres")
    work = plan_work(rng, seconds, run_id)
    log(f"seed {seed}: {len(faults)} faults, {len(work)} workload items, dir {directory}")
    ledger = directory / "ledger.jsonl"
    history = History(wall_minus_boot=time.time() - now(),
                      reused_handlers=[name for name, handler in handlers(reuse).items()
                                       if handler.get("max_jobs_per_child", 1) > 1
                                       or handler.get("child_concurrency", 1) > 1])
    cluster = Cluster(directory, store=store, pool=run_id, supervisors=supervisors,
                      reuse=reuse)
    monitor = ProcessMonitor(ledger)
    try:
        cluster.start()
        monitor.start()
        with Client(cluster.store, pool=run_id, wait_replicas=cluster.wait_replicas) \
                as work_client, Client(cluster.store, pool=run_id) as fault_client:
            workload = Workload(work_client, history, ledger, log)
            _play(cluster, history, faults, workload, work, fault_client, log)
            log("healing")
            cluster.heal()
            _finish(cluster, history, work_client, log)
            history.records = {record["key"]: record
                               for record in retried(work_client.jobs)}
        monitor.stop()
        _stop_supervisors(cluster, history, monitor)
        with Client(cluster.store, pool=run_id) as client:
            history.schedule_ticks = _schedule_ticks(client)
        history.leftovers += [f"pid {pid} (from the ledger)" for pid in monitor.alive()]
        history.leftovers += job_processes_by_environment(run_id)
        history.runs = read_ledger(ledger)
        history.fates = monitor.fates()
        if workload.undispatched:
            log(f"never dispatched (the store failed every retry): {workload.undispatched}")
    finally:
        cluster.close()
        save_history(history, directory / "history.json")
    return check(history)


def _schedule_ticks(client: Client) -> list[dict[str, Any]]:
    """The tick schedule's record and the tick of each of its jobs, for check 7."""
    views = [view for view in retried(client.schedules) if view["name"] == TICK_SCHEDULE]
    if not views:
        return []
    (view,) = views
    keys = [record["key"] for record in retried(client.jobs)
            if record.get("schedule") == TICK_SCHEDULE]
    ticks = [datetime.strptime(key.removeprefix("tick-"), "%Y%m%dT%H%M%SZ")
             .replace(tzinfo=UTC).timestamp() for key in keys]
    return [{"name": TICK_SCHEDULE, "every": float(TICK_EVERY), "fires": view["fires"],
             "skipped": view["skipped"], "missed": view["missed"], "ticks": ticks}]


def save_history(history: History, path: Path) -> None:
    """Everything the checker was given but the ledger, for a look after the run."""
    saved = dataclasses.asdict(history)
    saved.pop("runs")
    path.write_text(json.dumps(saved, indent=1, default=str))


def _play(cluster: Cluster, history: History, faults: list[Fault], workload: Workload,
          work: list[Work], fault_client: Client, log: Callable[[str], None]) -> None:
    """The workload and each lane of faults, each in a thread of its own, on one clock."""
    injector = FaultInjector(cluster, history, fault_client, log)
    started = time.monotonic()
    stopping = threading.Event()
    errors: list[BaseException] = []

    def lane(faults_of_lane: list[Fault]) -> None:
        try:
            for fault in faults_of_lane:
                if stopping.wait(max(0.0, started + fault.at - time.monotonic())):
                    return
                injector.inject(fault)
        except BaseException as error:
            errors.append(error)
            stopping.set()

    threads = [threading.Thread(target=workload.play, args=(work, started, stopping),
                                name="workload")]
    threads += [threading.Thread(target=lane, args=([f for f in faults if f.lane == number],),
                                 name=f"faults-{number}")
                for number in sorted({fault.lane for fault in faults})]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if workload.error is not None:
        errors.append(workload.error)
    if errors:
        raise RuntimeError(f"the run failed: {errors!r}") from errors[0]


def _finish(cluster: Cluster, history: History, client: Client,
            log: Callable[[str], None]) -> None:
    """Stop the long-running jobs as a user would, and wait for every job to end."""
    for key, kind in sorted(history.kinds.items()):
        if kind == "long" and key not in history.stops:
            history.stops[key] = now()
            done = cluster.poolsup("stop", key, "--no-wait")
            if done.returncode not in (0, 4):
                log(f"poolsup stop {key}: exit {done.returncode}: {done.stderr.strip()}")

    def all_finished() -> bool:
        records = retried(client.jobs)
        live = [r["key"] for r in records if r["key"] in history.kinds
                and r["state"] not in ("succeeded", "failed", "stopped")]
        return not live

    if not wait_until(all_finished, FINISH_WAIT, interval=0.5):
        log(f"jobs still live after {FINISH_WAIT} s")


def _stop_supervisors(cluster: Cluster, history: History, monitor: ProcessMonitor) -> None:
    def all_gone() -> bool:
        monitor.poll()
        return not monitor.alive()

    wait_until(all_gone, PROCESSES_GONE_WAIT, 0.1)
    for supervisor in (*cluster.ids, cluster.joiner):
        if cluster.running(supervisor):
            history.drains.append(Drain(supervisor, cluster.drain(supervisor)))
    monitor.poll()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    directory = args.dir or Path(tempfile.mkdtemp(prefix=f"poolsup-chaos-{args.seed}-"))
    directory.mkdir(parents=True, exist_ok=True)
    log_file = (directory / "driver.log").open("a", buffering=1)

    def log(message: str) -> None:
        line = f"[chaos {time.strftime('%H:%M:%S')}] {message}"
        print(line, flush=True)
        log_file.write(line + "\n")

    if not 1 <= args.supervisors <= 24:
        raise SystemExit("--supervisors: from 1 to 24")
    store = "sentinel" if args.sentinel else args.store
    if args.reuse < 1:
        raise SystemExit("--reuse: 1 or more")
    report = chaos_run(args.minutes, args.seed, store, directory, log, args.supervisors,
                       args.overlap, args.reuse)
    text = render(report)
    print(text, flush=True)
    (directory / "report.txt").write_text(text + "\n")
    if report.ok and not args.keep:
        shutil.rmtree(directory, ignore_errors=True)
    else:
        print(f"run files kept in {directory}; replay: python -m tests.chaos "
              f"--minutes {args.minutes} --seed {args.seed} --store {store} "
              f"--supervisors {args.supervisors}{' --overlap' if args.overlap else ''}",
              flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
