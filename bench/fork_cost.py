"""What a Python fork costs its child before the child's first line, on this machine: the
floor under a fresh job's child, whatever poolsup does after.

    python bench/fork_cost.py [--forks 50]

Forks `--forks` children from this process, first bare, then with the fork server's
modules imported, then with those frozen out of the collector (`gc.freeze()`, as the
fork server does). Each child reads its own CPU time (`time.process_time`, which starts
at its fork) and its minor page faults at its first line, sends them and exits at once.
Per child, the median of each; and CPU per fault, since a forked child's first writes to
the pages it shares with its parent each cost a copy-on-write fault, and on a virtual
machine those are dear.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import resource
import statistics
import time

from common import ROOT  # noqa: F401 - puts the repo first on sys.path


def first_line_cost(forks: int) -> tuple[float, float]:
    """The median CPU (ms) and minor faults of a forked child at its first line."""
    cpu: list[float] = []
    faults: list[float] = []
    for _ in range(forks):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            taken = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            spent = time.process_time()
            os.write(write_end, f"{spent} {taken}".encode())
            os._exit(0)
        os.close(write_end)
        os.waitpid(pid, 0)
        spent_text, taken_text = os.read(read_end, 100).decode().split()
        os.close(read_end)
        cpu.append(float(spent_text) * 1000)
        faults.append(float(taken_text))
    return statistics.median(cpu), statistics.median(faults)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--forks", type=int, default=50)
    args = parser.parse_args()
    rounds = [("bare interpreter", lambda: None),
              ("the fork server's modules imported", _import_fork_server),
              ("and gc.freeze()", gc.freeze)]
    for name, prepare in rounds:
        prepare()
        cpu_ms, faults = first_line_cost(args.forks)
        rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{name}: a child's CPU at its first line {cpu_ms:.2f} ms, {faults:.0f} minor "
              f"faults ({cpu_ms * 1000 / faults:.1f} us of CPU a fault, at most); "
              f"parent RSS {rss_mib:.0f} MiB")


def _import_fork_server() -> None:
    for name in ("sandbox.forkserver", "sandbox.warm_fork", "sandbox.child"):
        importlib.import_module(name)


if __name__ == "__main__":
    main()
