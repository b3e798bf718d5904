"""Python calls per no-op job in the supervisor's event-loop thread, from cProfile: a run of
3N jobs less a run of N (`supervisor_cpu.py` twice), so that the start and the end cancel
out.  Unlike CPU time, the count hardly moves on a busy machine (a few percent between
runs, as claims carry more or fewer jobs).

    python bench/supervisor_calls.py [--jobs 200] [--max-jobs-per-child 1] [--top 30]

The supervisor starts with a `sitecustomize` (written to a temporary directory put first
on PYTHONPATH) that profiles its main thread and dumps the stats at exit; `--top` prints
the functions with the most calls per job.
"""

from __future__ import annotations

import argparse
import os
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path

SITECUSTOMIZE = '''
import os
if b"supervisor.cli" in open("/proc/self/cmdline", "rb").read():
    import atexit, cProfile
    _profile = cProfile.Profile()
    _profile.enable()
    def _dump():
        _profile.disable()
        _profile.dump_stats(os.environ["POOLSUP_BENCH_PROFILE"])
    atexit.register(_dump)
'''


def profiled_run(jobs: int, extra: list[str], directory: Path) -> pstats.Stats:
    out = directory / f"profile-{jobs}"
    env = {**os.environ, "POOLSUP_BENCH_PROFILE": str(out),
           "PYTHONPATH": os.pathsep.join([str(directory), *sys.path[1:]])}
    subprocess.run([sys.executable, str(Path(__file__).with_name("supervisor_cpu.py")),
                    "--jobs", str(jobs), *extra], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return pstats.Stats(str(out))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--max-jobs-per-child", type=int, default=1)
    parser.add_argument("--top", type=int, default=0)
    args = parser.parse_args()
    extra = ["--max-jobs-per-child", str(args.max_jobs_per_child)]
    with tempfile.TemporaryDirectory(prefix="poolsup-calls-") as name:
        directory = Path(name)
        (directory / "sitecustomize.py").write_text(SITECUSTOMIZE)
        small = profiled_run(args.jobs, extra, directory)
        large = profiled_run(3 * args.jobs, extra, directory)
    jobs = 2 * args.jobs
    calls = large.total_calls - small.total_calls  # type: ignore[attr-defined]
    print(f"max_jobs_per_child={args.max_jobs_per_child}: {calls / jobs:.0f} Python calls "
          f"per job in the supervisor")
    if args.top:
        before = {name: row[1] for name, row in small.stats.items()}  # type: ignore[attr-defined]
        rows = sorted(((row[1] - before.get(name, 0)) / jobs, name)
                      for name, row in large.stats.items())  # type: ignore[attr-defined]
        for per_job, (path, line, function) in rows[::-1][:args.top]:
            print(f"{per_job:8.1f}  {path}:{line}:{function}")


if __name__ == "__main__":
    main()
