"""The physical floor of a fresh process per job: a preloaded parent per worker takes
one job with one Redis round trip, forks a child that runs a no-op and exits, and reaps
it. Nothing else: no lease, no fence, no outcome written, no sockets to the child.

    python bench/floor.py [--jobs 2000] [--workers N]

peers.py runs the same measurement in its run, as the "floor" row.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from typing import Any

import psutil
import redis
from common import redis_server
from cpu_split import Part, per_job_ms, redis_process, snapshot, wait_exited

QUEUE = "floor:jobs"


def _worker(url: str, marks: Any) -> None:
    client = redis.Redis.from_url(url)
    first, last = 0.0, 0.0
    while client.lpop(QUEUE) is not None:  # the one store round trip per job
        started = time.time()
        first = first or started
        pid = os.fork()
        if pid == 0:
            os._exit(0)  # the no-op job
        os.waitpid(pid, 0)
        last = time.time()
    marks.put((first, last))


def floor_throughput(url: str, jobs: int, workers: int) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    client.delete(QUEUE)
    client.rpush(QUEUE, *range(jobs))
    context = multiprocessing.get_context("fork")
    marks = context.Queue()
    server = redis_process(url)
    before = snapshot({"redis": Part(own=(server,))})
    launched = time.time()
    processes = [context.Process(target=_worker, args=(url, marks)) for _ in range(workers)]
    for process in processes:
        process.start()
    parents = tuple(psutil.Process(process.pid) for process in processes)
    spans = [marks.get(timeout=600) for _ in processes]
    # A parent exits once it has sent its marks: read it exited, before join reaps it.
    wait_exited((parent.pid for parent in parents), 60)
    after = snapshot({"parents": Part(own=parents), "children": Part(below=parents),
                      "redis": Part(own=(server,))})
    for process in processes:
        process.join()
    first = min(start for start, _ in spans if start)
    last = max(end for _, end in spans)
    return {"jobs": jobs, "completed": jobs, "first_start": first, "last_finish": last,
            "span_s": last - first, "jobs_per_s": jobs / (last - first),
            "wall_s": last - launched, "cpu_ms_per_job": per_job_ms(before, after, jobs)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    with redis_server() as url:
        result = floor_throughput(url, args.jobs, args.workers)
    print(f"floor: {result['jobs_per_s']:.0f} jobs/s ({args.workers} workers, "
          f"{args.jobs} jobs, {result['span_s']:.2f} s)")
    print("CPU per job: " + ", ".join(f"{part} {ms:.2f} ms"
                                      for part, ms in result["cpu_ms_per_job"].items()))


if __name__ == "__main__":
    main()
