from hostile_pids import record


def run(job):
    record(job)
    raise RuntimeError("the handler gave up")
