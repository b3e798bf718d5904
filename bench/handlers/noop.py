import time


def run(job):
    return None


def started(job):
    """Returns the wall-clock time at which the handler started."""
    return {"started": time.time()}
