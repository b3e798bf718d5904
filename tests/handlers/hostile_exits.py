import os

from hostile_pids import record


def run(job):
    record(job)
    os._exit(0)
