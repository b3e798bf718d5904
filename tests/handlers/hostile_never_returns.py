import time

from hostile_pids import record


def run(job):
    record(job)
    while True:
        time.sleep(1)
