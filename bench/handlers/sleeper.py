def run(job):
    job.wait_stop(float(job.payload.get("seconds", 60)))
    return None
