"""Double-forks a daemon (setsid, its parent exits), then hangs."""

import os
import time

from hostile_pids import record


def run(job):
    record(job)
    ready_read, ready_write = os.pipe()
    intermediate = os.fork()
    if intermediate == 0:
        os.setsid()
        if os.fork() == 0:
            record(job)
            os.write(ready_write, b"x")
            time.sleep(60)
        os._exit(0)
    os.waitpid(intermediate, 0)
    os.read(ready_read, 1)
    while True:
        time.sleep(0.05)
