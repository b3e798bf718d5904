"""Handlers for bench/moves.py: one that ignores stops (SIGTERM ends it), one that
ignores SIGTERM too (SIGKILL after stop_grace ends it)."""

import signal
import time


def sleeps(job):
    time.sleep(float(job.payload.get("seconds", 600)))


def ignores_sigterm(job):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(float(job.payload.get("seconds", 600)))
