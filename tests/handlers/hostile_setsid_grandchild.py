"""Starts a grandchild in a session of its own, which outlives its parent, and returns."""

import os
import time

from hostile_pids import record


def run(job):
    record(job)
    ready_read, ready_write = os.pipe()
    if os.fork() == 0:
        os.setsid()
        record(job)
        os.write(ready_write, b"x")
        time.sleep(60)
        os._exit(0)
    os.read(ready_read, 1)
    return {"left": "a grandchild behind"}
