"""An example handler: greets, waits a little, and honours stop requests."""

import time


def run(job):
    name = (job.payload or {}).get("name", "world")
    print(f"hello, {name} (attempt {job.attempt}, token {job.token})")
    if job.wait_stop(float((job.payload or {}).get("seconds", 1))):
        return {"greeted": name, "stopped_early": True}
    return {"greeted": name, "at": time.time()}
