from hostile_pids import record


def run(job):
    record(job)
    return object()
