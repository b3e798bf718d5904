import os

from hostile_pids import record


def run(job):
    record(job)
    os.close(1)  # the job's output socket: the sandbox must not need it to report
    return {"ok": True}
