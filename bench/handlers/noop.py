import resource
import time


def run(job):
    return None


def started(job):
    """Returns the wall-clock time at which the handler started."""
    return {"started": time.time()}


def cpu_marks(job):
    """The child's own CPU time (seconds since its fork) and its minor page faults at the
    handler's first line, and its CPU time at its last: bench/child_cost.py splits a
    fresh child's CPU around the handler."""
    first = time.process_time()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    return {"first": first, "faults": faults, "last": time.process_time()}
