"""A handler that proves when it was alive: it appends `key token pid monotonic` lines
to a ledger file every 20 ms while it runs."""

import os
import time


def run(job):
    ledger = job.payload["ledger"]
    seconds = float(job.payload.get("seconds", 1.0))
    busy = bool(job.payload.get("busy", False))
    end = time.monotonic() + seconds
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        while True:
            now = time.monotonic()
            os.write(fd, f"{job.key} {job.token} {os.getpid()} {now:.6f}\n".encode())
            if now >= end:
                break
            if busy:
                spin_until = now + 0.02
                while time.monotonic() < spin_until:
                    pass
            else:
                time.sleep(0.02)
    finally:
        os.close(fd)
    return {"pid": os.getpid(), "token": job.token, "attempt": job.attempt}
