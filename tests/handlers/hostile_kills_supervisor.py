"""A job that SIGKILLs its supervisor (its fork server's parent), as a job that crashes
or reboots its host would end it; it never returns."""

import os
import signal
import time


def run(job):
    with open(f"/proc/{os.getppid()}/stat") as stat:
        supervisor = int(stat.read().rsplit(")", 1)[1].split()[1])
    os.kill(supervisor, signal.SIGKILL)
    time.sleep(60)
