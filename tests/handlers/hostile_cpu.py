"""Burns CPU and never returns. With `children`, in that many forked processes too."""

import os

from hostile_pids import record


def run(job):
    record(job)
    for _ in range(job.payload.get("children", 0)):
        if os.fork() == 0:
            record(job)
            break
    while True:
        pass
