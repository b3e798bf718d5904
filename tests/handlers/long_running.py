"""A stop-aware long-running handler: appends `key token pid monotonic` ledger lines
while it runs, resumes from its checkpoint, and on a stop records why and returns."""

import os
import time


def run(job):
    ledger = job.payload["ledger"]
    count = (job.checkpoint or {}).get("count", 0)
    with open(job.payload["reasons"], "a") as reasons:
        reasons.write(f"start {job.key} {job.token} {count}\n")
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        while not job.wait_stop(0.05):
            count += 1
            os.write(fd, f"{job.key} {job.token} {os.getpid()} {time.monotonic():.6f}\n".encode())
            if count % 5 == 0:
                job.save_checkpoint({"count": count})
    finally:
        os.close(fd)
    with open(job.payload["reasons"], "a") as reasons:
        reasons.write(f"stop {job.key} {job.token} {job.stop_reason}\n")
    return {"count": count, "stopped_for": job.stop_reason}
