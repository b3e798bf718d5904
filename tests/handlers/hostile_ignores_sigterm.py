import signal
import time

from hostile_pids import record


def run(job):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    record(job)
    while True:
        time.sleep(0.05)
