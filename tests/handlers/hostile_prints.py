"""Prints 100 MB to stdout, in 10,000 lines of 10 kB."""

import sys

from hostile_pids import record


def run(job):
    record(job)
    line = "x" * 9999 + "\n"
    for _ in range(10_000):
        sys.stdout.write(line)
    sys.stdout.flush()
    return {"printed_mb": 100}
