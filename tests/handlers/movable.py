"""A stop-aware long-running handler for moves: appends `key token pid monotonic`
ledger lines while it runs, logs its starts (with the checkpoint it resumed from), the
notes it takes and the stop it was asked for to an events file, and lingers `linger`
seconds after a stop before it returns (a wider window for a stop or a note to arrive
during a move)."""

import os
import time


def run(job):
    payload = job.payload
    count = (job.checkpoint or {}).get("count", 0)
    with open(payload["events"], "a", buffering=1) as events:
        events.write(f"start {job.key} {job.token} {count}\n")
        fd = os.open(payload["ledger"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

        def alive():
            os.write(fd, f"{job.key} {job.token} {os.getpid()} {time.monotonic():.6f}\n".encode())

        try:
            while not job.wait_stop(0.05):
                count += 1
                alive()
                while (note := job.next_notification(0)) is not None:
                    events.write(f"note {job.key} {job.token} {note}\n")
                if count % 5 == 0:
                    job.save_checkpoint({"count": count})
            events.write(f"stop {job.key} {job.token} {job.stop_reason}\n")
            end = time.monotonic() + float(payload.get("linger", 0))
            while time.monotonic() < end:
                alive()
                time.sleep(0.05)
        finally:
            os.close(fd)
    return {"count": count}
