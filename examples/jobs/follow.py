"""A long-running handler that resumes where it was: it counts through a feed and
checkpoints its position, so a drain, a move or a crash costs at most a few items."""


def run(job):
    position = (job.checkpoint or {}).get("position", 0)
    while not job.wait_stop(1.0):  # looking at stops makes the handler stop-aware
        position += 1  # ... process item `position` of job.payload["feed"] ...
        if position % 10 == 0:
            job.save_checkpoint({"position": position})
    # A drain ("drain") or a move ("rebalance") runs the job again elsewhere, from the
    # last checkpoint; a user's `poolsup stop` ("stop") ends it.
    job.save_checkpoint({"position": position})
    return {"position": position, "stopped_for": job.stop_reason}

