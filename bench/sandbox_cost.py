"""What confining one fresh job child costs, per profile: the time a job's child spends
in `sandbox.enforce.Enforcement` (mount namespace and decoys, no_new_privs, Landlock, the
syscall filter; what can be made ready once is made in the fork server, here the parent),
measured in the child itself, so fork and exit are not in it.

    python3 bench/sandbox_cost.py [--children 200]

Prints the median and 90th percentile per profile, in microseconds. Short: a few hundred
children per profile, a second or two in all.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox import enforce
from sandbox.policy import SandboxSpec, plan
from sandbox.scratch import ScratchRoot


def measure(spec: SandboxSpec, children: int, scratch: ScratchRoot) -> list[float]:
    enforcement = enforce.Enforcement(plan(spec, enforce.probe(), scratch.jobs), scratch.decoys)
    times = []
    for _ in range(children):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            start = time.perf_counter_ns()
            enforcement.hide()
            enforcement.confine()
            os.write(write_fd, str(time.perf_counter_ns() - start).encode())
            os._exit(0)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as reader:
            elapsed = reader.read()
        os.waitpid(pid, 0)
        times.append(int(elapsed) / 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--children", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        pool = Path(directory)
        hidden = [pool / "pool.toml", pool / "pool.db", pool / "pool.db-wal", pool / "pool.db-shm"]
        for path in hidden:
            path.write_text("x")
        scratch = ScratchRoot(directory)
        names = tuple(str(path) for path in hidden)
        profiles = {
            "off": SandboxSpec(profile="off"),
            "default": SandboxSpec(hidden=names),
            "strict": SandboxSpec(profile="strict", hidden=names, network=(443,)),
        }
        print(f"uid {os.geteuid()}, {args.children} children per profile")
        for name, spec in profiles.items():
            times = sorted(measure(spec, args.children, scratch))
            p90 = times[int(len(times) * 0.9)]
            print(f"{name:8} median {statistics.median(times):7.1f} us   p90 {p90:7.1f} us")
        scratch.close()


if __name__ == "__main__":
    main()
