"""Handlers for `poolsup debug`: one busy in a Python loop (with a helper thread and a
subprocess), one stuck in C code that holds the GIL."""

import subprocess
import threading
import time


def spin(job):
    sleeper = subprocess.Popen(["sleep", "60"])
    waiter = threading.Thread(target=time.sleep, args=(60,), name="helper", daemon=True)
    waiter.start()
    with open(job.payload["pid_file"], "w") as pid_file:
        pid_file.write(str(sleeper.pid))
    count = 0
    while not job.stopping:
        for _ in range(1_000_000):
            count += 1  # the busy line
    sleeper.kill()
    return count


def stuck_in_c(job):
    # One call into C that holds the GIL for hours and never looks for signals.
    return sum(range(10**14))
