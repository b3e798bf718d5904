"""A job that SIGKILLs its fork server (its parent), as any job running as the
supervisor's user can; it never returns: it dies with the fork server."""

import os
import signal
import time


def run(job):
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(60)
